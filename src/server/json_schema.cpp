// The JSON-Schema subset of response_format (json_schema.h).
#include "server/json_schema.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <string_view>

#include <fmt/format.h>

namespace flashdllm::server {
namespace {

using nlohmann::json;

constexpr int kMaxDepth = 32;      // nesting of sub-schemas
constexpr int kMaxSchemas = 4096;  // sub-schemas in one schema
constexpr int kMaxRefChain = 64;   // $refs followed on one value

const std::set<std::string, std::less<>>& type_names() {
  static const std::set<std::string, std::less<>> t = {"object",  "array",   "string", "number",
                                                       "integer", "boolean", "null"};
  return t;
}

const std::set<std::string, std::less<>>& annotations() {
  static const std::set<std::string, std::less<>> a = {"title", "description", "default", "examples", "$schema",
                                                       "$id",   "$comment",    "format",  "strict"};
  return a;
}

std::string join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : fmt::format("{}.{}", path, key);
}

/// The schema a $ref names ("#", "#/$defs/<name>", "#/definitions/<name>"), or nullptr.
const json* resolve(const json& root, const std::string& ref) {
  if (ref == "#") return &root;
  for (const char* defs : {"$defs", "definitions"}) {
    const std::string prefix = fmt::format("#/{}/", defs);
    if (ref.rfind(prefix, 0) != 0 || !root.is_object()) continue;
    const auto d = root.find(defs);
    if (d == root.end() || !d->is_object()) return nullptr;
    const auto s = d->find(ref.substr(prefix.size()));
    return s == d->end() ? nullptr : &*s;
  }
  return nullptr;
}

bool is_count(const json& v) { return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0); }

class Checker {
 public:
  explicit Checker(const json& root) : root_(root) {}

  std::optional<SchemaProblem> check(const json& s, const std::string& path, int depth) {
    if (s.is_boolean()) return std::nullopt;  // true: anything; false: nothing
    if (!s.is_object()) return SchemaProblem{path, "a schema must be an object (or true / false)"};
    if (depth > kMaxDepth) return SchemaProblem{path, fmt::format("schemas nest deeper than {} levels", kMaxDepth)};
    if (++count_ > kMaxSchemas) return SchemaProblem{path, fmt::format("more than {} sub-schemas", kMaxSchemas)};
    for (const auto& [k, v] : s.items())
      if (auto p = keyword(k, v, join(path, k), depth)) return p;
    return std::nullopt;
  }

 private:
  std::optional<SchemaProblem> schemas_of(const json& v, const std::string& at, int depth, bool array) {
    if (array ? !v.is_array() || v.empty() : !v.is_object())
      return SchemaProblem{at, array ? "must be a non-empty array of schemas" : "must be an object of schemas"};
    if (array) {
      for (size_t i = 0; i < v.size(); ++i)
        if (auto p = check(v[i], fmt::format("{}[{}]", at, i), depth + 1)) return p;
    } else {
      for (const auto& [name, sub] : v.items())
        if (auto p = check(sub, join(at, name), depth + 1)) return p;
    }
    return std::nullopt;
  }

  std::optional<SchemaProblem> keyword(const std::string& k, const json& v, const std::string& at, int depth) {
    if (annotations().count(k)) return std::nullopt;
    if (k == "type") {
      auto known = [](const json& t) { return t.is_string() && type_names().count(t.get<std::string>()) > 0; };
      const bool ok = v.is_array() ? !v.empty() && std::all_of(v.begin(), v.end(), known) : known(v);
      if (!ok)
        return SchemaProblem{at, "must be one of object, array, string, number, integer, boolean, null (or a list)"};
      return std::nullopt;
    }
    if (k == "properties" || k == "$defs" || k == "definitions") return schemas_of(v, at, depth, false);
    if (k == "anyOf" || k == "allOf") return schemas_of(v, at, depth, true);
    if (k == "items" || k == "additionalProperties") return check(v, at, depth + 1);
    if (k == "required") {
      if (!v.is_array() || !std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_string(); }))
        return SchemaProblem{at, "must be an array of property names"};
      return std::nullopt;
    }
    if (k == "minItems" || k == "maxItems" || k == "minLength" || k == "maxLength") {
      if (!is_count(v)) return SchemaProblem{at, "must be a non-negative integer"};
      return std::nullopt;
    }
    if (k == "minimum" || k == "maximum" || k == "exclusiveMinimum" || k == "exclusiveMaximum") {
      if (!v.is_number()) return SchemaProblem{at, "must be a number"};
      return std::nullopt;
    }
    if (k == "multipleOf") {
      if (!v.is_number() || !(v.get<double>() > 0.0)) return SchemaProblem{at, "must be a number > 0"};
      return std::nullopt;
    }
    if (k == "enum") {
      if (!v.is_array() || v.empty()) return SchemaProblem{at, "must be a non-empty array"};
      return std::nullopt;
    }
    if (k == "const") return std::nullopt;
    if (k == "$ref") {
      if (!v.is_string() || !resolve(root_, v.get<std::string>()))
        return SchemaProblem{at, "must be \"#\", \"#/$defs/<name>\" or \"#/definitions/<name>\" naming a schema here"};
      return std::nullopt;
    }
    return SchemaProblem{at, fmt::format("the keyword '{}' is not supported by this server's validation (supported: "
                                         "docs/serving.md, response_format)",
                                         k)};
  }

  const json& root_;
  int count_ = 0;
};

std::string kind(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

bool has_type(const json& v, std::string_view t) {
  if (t == "integer")
    return v.is_number_integer() ||
           (v.is_number_float() && std::isfinite(v.get<double>()) && std::floor(v.get<double>()) == v.get<double>());
  if (t == "number") return v.is_number();
  if (t == "string") return v.is_string();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  if (t == "array") return v.is_array();
  return v.is_object();
}

/// Unicode code points of a UTF-8 string (bytes that do not continue a character).
int64_t code_points(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

class Validator {
 public:
  explicit Validator(const json& root) : root_(root) {}

  std::optional<std::string> at(const json& v, const json& s, const std::string& ptr, int refs) const {
    if (s.is_boolean())
      return s.get<bool>() ? std::nullopt : std::optional<std::string>(fail(ptr, "no value is allowed here"));
    if (auto it = s.find("$ref"); it != s.end()) {
      if (refs >= kMaxRefChain) return fail(ptr, fmt::format("more than {} $refs followed on one value", kMaxRefChain));
      if (auto e = at(v, *resolve(root_, it->get<std::string>()), ptr, refs + 1)) return e;
    }
    if (auto e = scalar(v, s, ptr)) return e;
    if (v.is_object())
      if (auto e = object(v, s, ptr)) return e;
    if (v.is_array())
      if (auto e = array(v, s, ptr)) return e;
    if (auto it = s.find("allOf"); it != s.end())
      for (const json& sub : *it)
        if (auto e = at(v, sub, ptr, 0)) return e;
    if (auto it = s.find("anyOf"); it != s.end()) {
      const bool any = std::any_of(it->begin(), it->end(), [&](const json& sub) { return !at(v, sub, ptr, 0); });
      if (!any) return fail(ptr, fmt::format("{} matches none of the anyOf schemas", kind(v)));
    }
    return std::nullopt;
  }

 private:
  static std::string fail(const std::string& ptr, const std::string& what) {
    return fmt::format("at {}: {}", ptr.empty() ? "/" : ptr, what);
  }

  /// type, enum, const, the numeric bounds and the string lengths.
  std::optional<std::string> scalar(const json& v, const json& s, const std::string& ptr) const {
    if (auto it = s.find("type"); it != s.end()) {
      const bool ok = it->is_array() ? std::any_of(it->begin(), it->end(),
                                                   [&](const json& t) { return has_type(v, t.get<std::string>()); })
                                     : has_type(v, it->get<std::string>());
      if (!ok) return fail(ptr, fmt::format("{} is not of type {}", kind(v), it->dump()));
    }
    if (auto it = s.find("enum"); it != s.end() && std::find(it->begin(), it->end(), v) == it->end())
      return fail(ptr, fmt::format("{} is not one of the enum values", v.dump()));
    if (auto it = s.find("const"); it != s.end() && *it != v)
      return fail(ptr, fmt::format("{} is not the const value {}", v.dump(), it->dump()));
    if (v.is_number()) {
      const double x = v.get<double>();
      auto bound = [&](const char* k, auto bad) -> std::optional<std::string> {
        if (auto it = s.find(k); it != s.end() && bad(x, it->template get<double>()))
          return fail(ptr, fmt::format("{} violates {} {}", v.dump(), k, it->dump()));
        return std::nullopt;
      };
      if (auto e = bound("minimum", [](double a, double b) { return a < b; })) return e;
      if (auto e = bound("maximum", [](double a, double b) { return a > b; })) return e;
      if (auto e = bound("exclusiveMinimum", [](double a, double b) { return a <= b; })) return e;
      if (auto e = bound("exclusiveMaximum", [](double a, double b) { return a >= b; })) return e;
      if (auto e = bound("multipleOf", [](double a, double b) {
            const double q = a / b;
            return !(std::abs(q - std::round(q)) <= 1e-9 * std::max(1.0, std::abs(q)));
          }))
        return e;
    }
    if (v.is_string()) {
      const int64_t n = code_points(v.get_ref<const std::string&>());
      if (auto it = s.find("minLength"); it != s.end() && n < it->get<int64_t>())
        return fail(ptr, fmt::format("a string of {} characters is shorter than minLength {}", n, it->dump()));
      if (auto it = s.find("maxLength"); it != s.end() && n > it->get<int64_t>())
        return fail(ptr, fmt::format("a string of {} characters is longer than maxLength {}", n, it->dump()));
    }
    return std::nullopt;
  }

  std::optional<std::string> object(const json& v, const json& s, const std::string& ptr) const {
    if (auto it = s.find("required"); it != s.end())
      for (const json& name : *it)
        if (!v.contains(name.get<std::string>()))
          return fail(ptr, fmt::format("the required property '{}' is missing", name.get<std::string>()));
    const auto props = s.find("properties");
    const auto extra = s.find("additionalProperties");
    for (const auto& [k, x] : v.items()) {
      const std::string child = fmt::format("{}/{}", ptr, k);
      if (props != s.end() && props->contains(k)) {
        if (auto e = at(x, (*props)[k], child, 0)) return e;
      } else if (extra != s.end()) {
        if (extra->is_boolean() && !extra->get<bool>())
          return fail(ptr, fmt::format("the property '{}' is not allowed (additionalProperties false)", k));
        if (auto e = at(x, *extra, child, 0)) return e;
      }
    }
    return std::nullopt;
  }

  std::optional<std::string> array(const json& v, const json& s, const std::string& ptr) const {
    const auto n = static_cast<int64_t>(v.size());
    if (auto it = s.find("minItems"); it != s.end() && n < it->get<int64_t>())
      return fail(ptr, fmt::format("{} items, fewer than minItems {}", n, it->dump()));
    if (auto it = s.find("maxItems"); it != s.end() && n > it->get<int64_t>())
      return fail(ptr, fmt::format("{} items, more than maxItems {}", n, it->dump()));
    if (auto it = s.find("items"); it != s.end())
      for (size_t i = 0; i < v.size(); ++i)
        if (auto e = at(v[i], *it, fmt::format("{}/{}", ptr, i), 0)) return e;
    return std::nullopt;
  }

  const json& root_;
};

}  // namespace

std::optional<SchemaProblem> check_schema(const nlohmann::json& schema) { return Checker(schema).check(schema, "", 0); }

std::optional<std::string> validate_json(const nlohmann::json& value, const nlohmann::json& schema) {
  return Validator(schema).at(value, schema, "", 0);
}

}  // namespace flashdllm::server
