// A line on stderr naming what a long bench runs now.
#pragma once

#include <unistd.h>

#include <iostream>
#include <string>

namespace kvtier::bench {

// Rewritten in place on a terminal, one line each otherwise (a log keeps them all). Rows go to
// stdout, so `--json` output stays clean.
class Progress {
 public:
  Progress() : tty_(isatty(STDERR_FILENO) == 1) {}
  ~Progress() {
    if (tty_ && shown_) std::cerr << "\n";
  }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void show(const std::string& line) {
    if (tty_) {
      std::cerr << "\r" << line << std::string(line.size() < width_ ? width_ - line.size() : 0, ' ')
                << std::flush;
      width_ = line.size();
    } else {
      std::cerr << line << "\n";
    }
    shown_ = true;
  }

 private:
  bool tty_;
  bool shown_ = false;
  size_t width_ = 0;
};

}  // namespace kvtier::bench
