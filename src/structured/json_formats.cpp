// The string formats a JSON Schema may name, as regexes over the decoded string (all ASCII, so
// nothing in them needs a JSON escape). Each is a subset of what the format's RFC allows, chosen
// so that Python's datetime / uuid parsers accept every match:
//   date       YYYY-MM-DD, years 0001-9999, days valid for the month, Feb 29 in leap years only
//   time       HH:MM:SS[.ffffff](Z|+HH:MM|-HH:MM) (RFC 3339 full-time, no leap second)
//   date-time  date "T" time
//   uuid       8-4-4-4-12 hex digits
//   email      dot-separated atoms of [A-Za-z0-9_+-] "@" dot-separated labels (two or more)
//   ipv4       four decimal octets 0-255 without leading zeros
#include "structured/json_schema_compiler.h"

namespace nanovllm::structured {

namespace {

std::string date_regex() {
  const std::string year = "([1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])";
  const std::string month_day =
      "((0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])|(0[13-9]|1[0-2])-(29|30)|(0[13578]|1[02])-31)";
  const std::string leap_year =
      "([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)";
  return "(" + year + "-" + month_day + "|" + leap_year + "-02-29)";
}

std::string time_regex() {
  return "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5]["
         "0-9])";
}

}  // namespace

std::optional<std::string> format_regex(const std::string& format) {
  if (format == "date") return date_regex();
  if (format == "time") return time_regex();
  if (format == "date-time") return date_regex() + "T" + time_regex();
  if (format == "uuid")
    return std::string(
        "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}");
  if (format == "email") {
    return std::string(
        "[A-Za-z0-9_+-]+(\\.[A-Za-z0-9_+-]+)*@[A-Za-z0-9]+(-+[A-Za-z0-9]+)*(\\.[A-Za-z0-9]+(-+[A-"
        "Za-z0-9]+)*)+");
  }
  if (format == "ipv4") {
    const std::string octet = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
    return octet + "(\\." + octet + "){3}";
  }
  return std::nullopt;
}

}  // namespace nanovllm::structured
