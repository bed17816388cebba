// Cocktail's chunk map as text and JSON: which blocks got which precision, the similarity range,
// the measured bits per element of the context, and which encoder ran (`chorus generate --doc`,
// `chorus agents`).
#pragma once
#include <cstddef>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "chorus/engine.h"  // ChunkMapReport, Engine

namespace chorus::eval {

// The map of a context of `tokens` tokens holding shared_bytes (engine: its Fp16Bytes).
void PrintChunkMap(const ChunkMapReport& m, size_t shared_bytes, size_t tokens, const Engine& engine,
                   std::FILE* out = stdout);
// The same with the fp16 bytes of those tokens given (a report printed after its engine is gone).
void PrintChunkMap(const ChunkMapReport& m, size_t shared_bytes, size_t tokens, size_t fp16_bytes, std::FILE* out);
nlohmann::json ChunkMapJson(const ChunkMapReport& m);

}  // namespace chorus::eval
