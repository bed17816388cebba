// Shared pieces of the chorus command line: subcommand registration, model loading, reporting.
#pragma once
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "chorus/engine.h"     // Engine, ChunkMapReport
#include "eval/bench.h"        // kWikiTextTest, ReadDefaultText
#include "eval/chunk_map.h"    // PrintChunkMap, ChunkMapJson
#include "eval/divergence.h"   // KlFromLogProbs
#include "eval/harness.h"      // LoadModel, ReadFile, Median, ChatFrame; Model, Status (src/util)
#include "eval/peer.h"         // RunPeerJson, RunBestPeerJson, ResidentBytes

namespace chorus::cli {

using eval::KlFromLogProbs;  // eval/divergence.h
using eval::kWikiTextTest, eval::ReadDefaultText;                      // eval/bench.h
using eval::LoadModel, eval::ReadFile, eval::Median, eval::ChatFrame;  // eval/harness.h
using eval::PrintChunkMap, eval::ChunkMapJson;                         // eval/chunk_map.h
using eval::RunPeerJson, eval::RunBestPeerJson, eval::ResidentBytes;   // eval/peer.h

// Each subcommand registers itself on the app and returns the function that runs it.
using RunFn = std::function<int()>;
RunFn AddGenerate(CLI::App& app);
RunFn AddInspect(CLI::App& app);
RunFn AddEval(CLI::App& app);
RunFn AddBench(CLI::App& app);
RunFn AddAgents(CLI::App& app);
RunFn AddEmbed(CLI::App& app);
RunFn AddServe(CLI::App& app);
RunFn AddCalibrate(CLI::App& app);
std::pair<CLI::App*, RunFn> AddPolykvEval(CLI::App* eval);
std::pair<CLI::App*, RunFn> AddComixEval(CLI::App* eval);
std::pair<CLI::App*, RunFn> AddNeedleEval(CLI::App* eval);
std::pair<CLI::App*, RunFn> AddSegmentEval(CLI::App* eval);

// Prints "error: <message>" on one line to stderr and returns exit code 1.
int Fail(const Status& s);

// A document to share (`--doc`): ReadFile, and an error naming the flag and path if the file is
// empty or only whitespace (agents would read the chat frame alone).
Result<std::string> ReadDocument(const std::string& path, const char* flag = "--doc");

// Default thread count: the machine's cores (at least 1).
int DefaultThreads();
// -t,--threads N (1..256, default shown): the thread flag every command but embed shares.
void AddThreadsFlag(CLI::App* cmd, int& threads);

// The 1-minute load average (getloadavg), -1 if unknown: benchmarks record it beside their numbers.
double LoadAverage();

// Prints j on one line; an object gets "kernel_path" (MatMulPath(): the SIMD kernels in use).
void PrintJson(const nlohmann::json& j);

// --cpu-target NAME on every subcommand of app (recursively), all bound to *value: caps the SIMD
// kernels for the run (ops/cpu_target.h). An unknown name fails parsing, listing the valid ones.
void AddCpuTargetFlag(CLI::App& app, std::string* value);
// Applies a parsed --cpu-target (empty: keep auto / CHORUS_CPU_TARGET); a target this CPU cannot
// run is an error naming what it has.
Status ApplyCpuTargetFlag(const std::string& value);

// "1000000", "64K", "1.5M", "2GiB", "512KB" -> bytes (K/M/G are powers of 1024); negative, empty or
// unparsable sizes are errors that quote the text.
Result<size_t> ParseBytes(const std::string& text);

// An engine window flag (`EngineOptions::kv_window`: "auto", "f16" or "q8"), checked before the
// model loads: an error names the flag and the valid values.
Status CheckEngineWindowFlag(const std::string& value);

// --kv-sink / --kv-window: the sink blocks and window rows of every sequence (the formats of sealed
// blocks are the policy's: PolicyFlags).
struct KvFlags {
  size_t sink_blocks = 1;
  std::string window = "f16";
};
void AddKvFlags(CLI::App* cmd, KvFlags& flags);

}  // namespace chorus::cli
