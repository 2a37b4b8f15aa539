// A Jinja engine for chat templates, with the semantics transformers renders them with:
// Jinja2's ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the
// loopcontrols extension, transformers' `{% generation %}` block, its `tojson` filter
// (json.dumps with ensure_ascii=False, indent, separators, sort_keys) and its globals
// `raise_exception` and `strftime_now`. What is supported and refused: docs/tokenizer.md.
//
// Strict: a filter, test or statement the engine does not know is an error at parse time
// naming it and its line; mutating a list or dict (list.append, dict.update) fails as in the
// immutable sandbox. Bounded: templates over 1 MiB, nesting deeper than 128 levels, output
// over RenderOptions::max_output_bytes, more than max_steps evaluation steps and macro recursion
// deeper than 100 calls are errors, never a crash.
//
// Thread safety: a Template is immutable after parsing; render() is const and may run
// concurrently from any number of threads.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "core/jinja/value.h"

namespace grpo::core::jinja {

struct Node;

struct RenderOptions {
  std::size_t max_output_bytes = std::size_t{64} << 20;
  std::size_t max_steps = 50'000'000;
  // strftime_now(format)'s clock: unset, the local time now (as Python's datetime.now()).
  std::function<std::string(const std::string& format)> strftime_now;
};

class Template {
 public:
  // Parses `source`; `name` (a path, or "NAME (tokenizer_config.json)") starts every error.
  // Throws JinjaError.
  Template(const std::string& source, std::string name);
  ~Template();
  Template(const Template&);
  Template& operator=(const Template&);

  // Renders with `context` (a dict of variables). Throws JinjaError: raised() for
  // raise_exception(), with the template's own message.
  std::string render(const Value& context, const RenderOptions& options = {}) const;

  const std::string& name() const { return name_; }

 private:
  struct Parsed;
  std::shared_ptr<const Parsed> parsed_;
  std::string name_;
};

}  // namespace grpo::core::jinja
