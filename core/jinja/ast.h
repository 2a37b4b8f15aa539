// The syntax tree of a parsed template. One node type for expressions and statements keeps the
// parser and the interpreter short; `kind` says which fields are used.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/jinja/value.h"

namespace grpo::core::jinja {

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    // expressions
    kLiteral,    // value
    kName,       // name
    kList,       // args: elements
    kTuple,      // args: elements
    kDict,       // args: key, value, key, value, ...
    kGetAttr,    // object, name
    kGetItem,    // object, args[0]: the index
    kSlice,      // object, args: start, stop, step (each may be null)
    kCall,       // object: the callee, args, kwargs
    kFilter,     // object: the input (null inside {% filter %}), name, args, kwargs
    kTest,       // object, name, args, kwargs, negated
    kUnary,      // op ("-", "+", "not"), object
    kBinary,     // op, args[0], args[1]; "and"/"or" short-circuit
    kCompare,    // object, then ops[i] with args[i]
    kCondExpr,   // args: test, then, else (null: undefined)
    // statements
    kText,       // value: the text
    kOutput,     // object
    kIf,         // args: conditions; bodies: one per condition, then the else body (maybe empty)
    kFor,        // targets, object: the iterable, args[0]: the filter (may be null); bodies: body, else;
                 // recursive
    kSet,        // targets (or name.attr in targets[0] + name for a namespace), object: the value
    kSetBlock,   // targets[0], bodies[0], args[0]: optional filter (kFilter with null input)
    kMacro,      // name, params (targets) with defaults (args, null when none), bodies[0]
    kCallBlock,  // object: the call, targets/args: the caller's params and defaults, bodies[0]
    kFilterBlock,  // object: the filter chain (innermost input null), bodies[0]
    kBreak,
    kContinue,
    kScope,      // bodies[0], rendered in place ({% generation %} of transformers)
  };

  Kind kind;
  int line = 0;
  int depth = 1;  // of the expression tree below (operator chains are built in loops, not recursion)
  Value value;
  std::string name;
  std::string attr;  // kSet on a namespace: the attribute
  bool negated = false;    // kTest: `is not`
  bool recursive = false;  // kFor: `recursive`
  NodePtr object;
  std::vector<NodePtr> args;
  std::vector<std::pair<std::string, NodePtr>> kwargs;
  std::vector<std::string> ops;
  std::vector<std::string> targets;
  std::vector<Body> bodies;

  Node(Kind k, int l) : kind(k), line(l) {}
};

// Limits that keep hostile templates from exhausting the stack or memory.
constexpr std::size_t kMaxTemplateBytes = 1 << 20;
constexpr int kMaxNesting = 128;     // nested parentheses, calls and blocks (parser recursion)
constexpr int kMaxTreeDepth = 512;  // any expression tree, e.g. a chain `a + a + ... + a`

// Parses `source` (the template's text, as in a .jinja file or tokenizer_config.json) with
// transformers' settings: trim_blocks, lstrip_blocks, no trailing newline kept, \r\n -> \n.
// Throws JinjaError naming `name` and the line.
Body parse_template(const std::string& source, const std::string& name);

}  // namespace grpo::core::jinja
