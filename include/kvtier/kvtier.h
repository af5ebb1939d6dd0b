// kvtier's public API in one include: what an engine that embeds kvtier uses. Keys, layouts,
// config and statuses (core); the Device interface and its implementations (device); the
// transfer engine; the host cache and its tiers; the connector (scheduler and worker sides,
// local cache or kvtierd) and the kvtierd client. docs/integration.md shows the calls per step.
#pragma once

#include "kvtier/cache/cache_manager.h"
#include "kvtier/cache/host_pool.h"
#include "kvtier/cache/tier_mover.h"
#include "kvtier/connector/connector_factory.h"
#include "kvtier/connector/scheduler_connector.h"
#include "kvtier/connector/worker_connector.h"
#include "kvtier/core/chunk_key.h"
#include "kvtier/core/clock.h"
#include "kvtier/core/config.h"
#include "kvtier/core/kv_layout.h"
#include "kvtier/core/status.h"
#include "kvtier/device/device.h"
#include "kvtier/device/fault_injecting_device.h"
#include "kvtier/device/host_device.h"
#include "kvtier/server/client.h"
#include "kvtier/tier/tier.h"
#include "kvtier/tier/tier_factory.h"
#include "kvtier/transfer/transfer_engine.h"
