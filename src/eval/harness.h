// Pieces every evaluation harness shares: loading the model and text it reads, and the chat frame
// its prompts are written in.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chorus/engine.h"  // Engine
#include "model/model.h"    // Model, ModelLoadOptions
#include "util/status.h"

namespace chorus::eval {

// Loads a model or returns an error naming the path and problem.
Result<std::unique_ptr<Model>> LoadModel(const std::string& path, const ModelLoadOptions& options = {});
// Reads a whole text file (error names the path).
Result<std::string> ReadFile(const std::string& path);
// The median of repeated measurements (the upper middle for an even count; 0 for none).
double Median(std::vector<double> v);
// The 1-minute load average (getloadavg), -1 if unknown: benchmarks record it beside their numbers.
double LoadAverage();
// The model's chat template split around a user turn's content: (before, after); without a
// template, ("", "\nAnswer:").
Result<std::pair<std::string, std::string>> ChatFrame(const Model& model);
// The same frame through an open engine's chat template (Engine::RenderChat): no second model load.
Result<std::pair<std::string, std::string>> ChatFrame(const Engine& engine);

}  // namespace chorus::eval
