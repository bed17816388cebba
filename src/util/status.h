// Status and Result<T> (include/chorus/status.h) with the library's formatting overload:
// Status::Error("no tensor '{}' in {}", name, path) formats with fmt, the format string checked at
// compile time. Code inside chorus includes this header; the public API has no fmt.
#pragma once
#include <fmt/format.h>  // fmt::format for Error(...)

#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "chorus/status.h"  // IWYU pragma: export

namespace chorus {

namespace detail {
template <typename... Args>
struct StatusFormat {
  using type = fmt::format_string<Args...>;
};
}  // namespace detail

template <typename Arg, typename... Args>
Status Status::Error(typename detail::StatusFormat<Arg, Args...>::type format, Arg&& arg, Args&&... args) {
  return Error(fmt::format(format, std::forward<Arg>(arg), std::forward<Args>(args)...));
}

}  // namespace chorus
