// A JSON-Schema subset for `response_format: {"type": "json_schema", ...}` (docs/serving.md): the
// server validates a generated answer against the request's schema and draws it again when it
// fails (a canvas cannot be constrained token by token; docs/decisions.md). Debian packages no C++
// validator (bookworm: `apt-cache search json schema` lists Go, Perl, JavaScript and Python ones),
// so this file checks the subset OpenAI's structured outputs document
// (https://platform.openai.com/docs/guides/structured-outputs, "Supported schemas"), written
// from the JSON Schema 2020-12 validation vocabulary (https://json-schema.org/draft/2020-12):
//
//   type (a name or a list of names: object, array, string, number, integer, boolean, null),
//   properties, required, additionalProperties (false / true / a schema), items (a schema),
//   minItems, maxItems, enum, const, anyOf, allOf, $ref to the root ("#") or to
//   "#/$defs/<name>" / "#/definitions/<name>", minLength, maxLength (code points), minimum,
//   maximum, exclusiveMinimum, exclusiveMaximum, multipleOf;
//   annotations, accepted and not checked: title, description, default, examples, $schema, $id,
//   $comment, format, strict, $defs / definitions (their schemas are checked).
//
// Anything else (pattern, patternProperties, oneOf, not, if/then/else, ...) is refused when the
// request is parsed, naming the keyword's path, rather than silently not checked.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace flashdllm::server {

/// Checks that `schema` (the value of json_schema.schema) uses only the subset above, with values
/// of the right types, every $ref resolving, at most 32 levels and 4096 sub-schemas. Returns
/// nullopt, or {path, message}: path the dotted location below the schema ("properties.age.type";
/// "" = the schema itself), message what is wrong there.
struct SchemaProblem {
  std::string path;
  std::string message;
};
std::optional<SchemaProblem> check_schema(const nlohmann::json& schema);

/// Validates `value` against a schema that check_schema accepted. Returns nullopt when it is valid,
/// else the first violation found, located in JSON-Pointer style ("at /items/2: 'x' is not an
/// integer"). $ref chains are followed at most 64 deep on one value (a schema that refers to itself
/// without consuming the value is reported, not looped on).
std::optional<std::string> validate_json(const nlohmann::json& value, const nlohmann::json& schema);

}  // namespace flashdllm::server
