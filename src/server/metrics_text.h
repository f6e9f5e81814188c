#pragma once
// /metrics: the engine's metrics in Prometheus text format (0.0.4), vLLM's names under "nanovllm:".
#include <string>

#include "engine/engine_metrics.h"

namespace nanovllm::server {

std::string render_metrics(const EngineMetrics& m, const std::string& model_name);

}  // namespace nanovllm::server
