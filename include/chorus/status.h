// Public: Status and Result<T> (errors that name the problem).
#pragma once
#include "util/status.h"  // IWYU pragma: export
