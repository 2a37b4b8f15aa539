// The interpreter: walks the syntax tree with Jinja2's scoping rules. Each for-loop iteration
// and each macro call gets its own frame (a `set` there does not leak out: templates use
// namespace() for that); `if` bodies share the enclosing frame.
#include <algorithm>
#include <optional>
#include <unordered_map>

#include "core/jinja/ast.h"
#include "core/jinja/builtins.h"
#include "core/jinja/jinja.h"
#include "core/util/strings.h"

namespace grpo::core::jinja {

struct Template::Parsed {
  Body body;
};

namespace {

constexpr int kMaxCallDepth = 100;

struct Frame {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Frame> parent;

  const Value* lookup(const std::string& name) const {
    for (const Frame* f = this; f; f = f->parent.get()) {
      auto it = f->vars.find(name);
      if (it != f->vars.end()) return &it->second;
    }
    return nullptr;
  }
};
using FramePtr = std::shared_ptr<Frame>;

enum class Flow { kNormal, kBreak, kContinue };

// Unknown filters and tests are errors when the template is parsed, as in Jinja2.
void check_names(const Body& body, const std::string& name);

void check_node(const Node* n, const std::string& name) {
  if (!n) return;
  if (n->kind == Node::Kind::kFilter && !find_filter(n->name))
    throw JinjaError(name, n->line, "unknown filter '" + n->name + "'" + did_you_mean(n->name, filter_names()) +
                                        " (see docs/tokenizer.md for the supported filters)");
  if (n->kind == Node::Kind::kTest && !find_test(n->name))
    throw JinjaError(name, n->line, "unknown test '" + n->name + "'" + did_you_mean(n->name, test_names()) +
                                        " (see docs/tokenizer.md for the supported tests)");
  check_node(n->object.get(), name);
  for (const auto& a : n->args) check_node(a.get(), name);
  for (const auto& kv : n->kwargs) check_node(kv.second.get(), name);
  for (const auto& b : n->bodies) check_names(b, name);
}

void check_names(const Body& body, const std::string& name) {
  for (const auto& n : body) check_node(n.get(), name);
}

// Whether `name` is read anywhere below (Jinja2 gives a macro varargs/kwargs when its body
// reads them).
bool reads_name(const Node* n, const std::string& name);
bool reads_name(const Body& body, const std::string& name) {
  for (const auto& n : body)
    if (reads_name(n.get(), name)) return true;
  return false;
}
bool reads_name(const Node* n, const std::string& name) {
  if (!n) return false;
  if (n->kind == Node::Kind::kName && n->name == name) return true;
  if (reads_name(n->object.get(), name)) return true;
  for (const auto& a : n->args)
    if (reads_name(a.get(), name)) return true;
  for (const auto& kv : n->kwargs)
    if (reads_name(kv.second.get(), name)) return true;
  for (const auto& b : n->bodies)
    if (reads_name(b, name)) return true;
  return false;
}

class Interpreter {
 public:
  Interpreter(const std::string& name, const RenderOptions& options) : name_(name), options_(options) {}

  std::string run(const Body& body, const Value& context) {
    auto root = std::make_shared<Frame>();
    if (context.is_dict())
      for (const auto& [k, v] : context.as_dict().items) root->vars[k] = v;
    std::string out;
    try {
      exec_body(body, root, out);
    } catch (const EvalError& e) {
      throw JinjaError(name_, line_, e.message, e.raised);
    }
    return out;
  }

 private:
  // ---- statements ----

  Flow exec_body(const Body& body, const FramePtr& frame, std::string& out) {
    for (const auto& n : body) {
      const Flow f = exec(*n, frame, out);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  void step(const Node& n) {
    line_ = n.line;
    if (++steps_ > options_.max_steps)
      fail("the template ran for more than " + std::to_string(options_.max_steps) + " steps (an endless or huge loop?)");
  }

  void append(std::string& out, const std::string& s) {
    out += s;
    if (out.size() > options_.max_output_bytes)
      fail("the output is larger than " + std::to_string(options_.max_output_bytes) + " bytes");
  }

  Flow exec(const Node& n, const FramePtr& frame, std::string& out) {
    step(n);
    switch (n.kind) {
      case Node::Kind::kText: append(out, n.value.as_string()); return Flow::kNormal;
      case Node::Kind::kOutput: {
        const Value v = eval(*n.object, frame);
        line_ = n.line;
        append(out, to_str(v));
        return Flow::kNormal;
      }
      case Node::Kind::kIf:
        for (std::size_t i = 0; i < n.args.size(); ++i) {
          if (truthy(eval(*n.args[i], frame))) return exec_body(n.bodies[i], frame, out);
        }
        return exec_body(n.bodies.back(), frame, out);
      case Node::Kind::kFor: return exec_for(n, frame, out);
      case Node::Kind::kSet: {
        Value v = eval(*n.object, frame);
        line_ = n.line;
        if (!n.attr.empty()) {
          const Value* ns = frame->lookup(n.name);
          if (!ns) fail("'" + n.name + "' is undefined");
          if (!ns->is_dict() || !ns->as_dict().is_namespace)
            fail("can only set attributes on a namespace(), '" + n.name + "' is a " + ns->type_name());
          ns->as_dict().set(n.attr, std::move(v));
        } else {
          assign(n.targets, v, *frame);
        }
        return Flow::kNormal;
      }
      case Node::Kind::kSetBlock: {
        std::string captured;
        exec_body(n.bodies[0], frame, captured);
        Value v(std::move(captured));
        if (n.args[0]) v = apply_filters(*n.args[0], v, frame);
        frame->vars[n.targets[0]] = std::move(v);
        return Flow::kNormal;
      }
      case Node::Kind::kMacro: frame->vars[n.name] = make_macro(n, frame); return Flow::kNormal;
      case Node::Kind::kCallBlock: {
        // The call's macro gets the block as its `caller` keyword argument.
        const Node& call = *n.object;
        const Value callee = eval(*call.object, frame);
        CallArgs a = eval_args(call, frame);
        a.keyword.emplace_back("caller", make_macro(n, frame, "caller"));
        line_ = n.line;
        require_defined(callee);
        if (!callee.is_callable()) fail("'" + callee.type_name() + "' object is not callable");
        append(out, to_str(callee.as_callable().fn(a)));
        return Flow::kNormal;
      }
      case Node::Kind::kFilterBlock: {
        std::string captured;
        exec_body(n.bodies[0], frame, captured);
        append(out, to_str(apply_filters(*n.object, Value(std::move(captured)), frame)));
        return Flow::kNormal;
      }
      case Node::Kind::kBreak: return Flow::kBreak;
      case Node::Kind::kContinue: return Flow::kContinue;
      case Node::Kind::kScope: return exec_body(n.bodies[0], frame, out);
      default: fail("internal error: an expression where a statement was expected");
    }
  }

  void assign(const std::vector<std::string>& targets, const Value& v, Frame& frame) {
    if (targets.size() == 1) {
      frame.vars[targets[0]] = v;
      return;
    }
    const List items = iterate(v);
    if (items.size() != targets.size())
      fail(std::string(items.size() < targets.size() ? "not enough" : "too many") + " values to unpack (expected " +
           std::to_string(targets.size()) + ", got " + std::to_string(items.size()) + ")");
    for (std::size_t i = 0; i < targets.size(); ++i) frame.vars[targets[i]] = items[i];
  }

  Flow exec_for(const Node& n, const FramePtr& frame, std::string& out) {
    const Value iterable = eval(*n.object, frame);
    line_ = n.line;
    return run_loop(n, frame, iterable, 0, out);
  }

  // One (possibly recursive) loop over `iterable`; `depth0` counts recursive loop(...) calls.
  Flow run_loop(const Node& n, const FramePtr& frame, const Value& iterable, int depth0, std::string& out) {
    if (iterable.is_none()) fail("'NoneType' object is not iterable");
    List items = iterate(iterable);
    if (n.args[0]) {  // {% for x in xs if cond %}: filtered before loop.length is known
      List kept;
      for (const Value& item : items) {
        step(n);
        auto f = std::make_shared<Frame>();
        f->parent = frame;
        assign(n.targets, item, *f);
        if (truthy(eval(*n.args[0], f))) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const auto length = static_cast<std::int64_t>(items.size());
    // loop.changed(*values): state shared by the iterations of this loop.
    auto last_changed = std::make_shared<std::optional<List>>();
    auto changed = std::make_shared<Callable>(Callable{"changed", [last_changed](const CallArgs& a) {
      if (*last_changed && a.positional.size() == (*last_changed)->size() &&
          std::equal(a.positional.begin(), a.positional.end(), (*last_changed)->begin(), equal))
        return Value(false);
      *last_changed = a.positional;
      return Value(true);
    }});
    std::shared_ptr<Callable> recurse;
    if (n.recursive) {
      const Node* node = &n;
      std::weak_ptr<Frame> outer = frame;
      recurse = std::make_shared<Callable>(Callable{"loop", [this, node, outer, depth0](const CallArgs& a) {
        if (a.positional.size() != 1 || !a.keyword.empty()) fail("loop() takes exactly one argument: the items to loop over");
        if (++call_depth_ > kMaxCallDepth) {
          --call_depth_;
          fail("recursive loop calls nested deeper than " + std::to_string(kMaxCallDepth));
        }
        struct Depth {
          int& d;
          ~Depth() { --d; }
        } depth{call_depth_};
        auto f = outer.lock();
        if (!f) fail("loop() was called after its loop ended");
        std::string inner;
        const int saved_line = line_;
        run_loop(*node, f, a.positional[0], depth0 + 1, inner);
        line_ = saved_line;
        return Value(std::move(inner));
      }});
    }
    for (std::int64_t i = 0; i < length; ++i) {
      step(n);  // every iteration counts, even of an empty body
      auto f = std::make_shared<Frame>();
      f->parent = frame;
      auto loop = std::make_shared<Dict>();
      loop->is_loop = true;
      loop->set("index", Value(i + 1));
      loop->set("index0", Value(i));
      loop->set("revindex", Value(length - i));
      loop->set("revindex0", Value(length - i - 1));
      loop->set("first", Value(i == 0));
      loop->set("last", Value(i == length - 1));
      loop->set("length", Value(length));
      loop->set("depth", Value(depth0 + 1));
      loop->set("depth0", Value(depth0));
      loop->set("changed", Value(changed));
      loop->call = recurse;
      if (i > 0) loop->set("previtem", items[static_cast<std::size_t>(i - 1)]);
      if (i + 1 < length) loop->set("nextitem", items[static_cast<std::size_t>(i + 1)]);
      loop->set("cycle", Value(std::make_shared<Callable>(Callable{"cycle", [i](const CallArgs& a) {
                            if (a.positional.empty()) fail("no items for cycling given");
                            return a.positional[static_cast<std::size_t>(i) % a.positional.size()];
                          }})));
      f->vars["loop"] = Value(loop);
      assign(n.targets, items[static_cast<std::size_t>(i)], *f);
      if (exec_body(n.bodies[0], f, out) == Flow::kBreak) break;
    }
    if (length == 0) return exec_body(n.bodies[1], frame, out);
    return Flow::kNormal;
  }

  // A macro (or a call block's caller): a callable that renders its body in a fresh frame
  // whose parent is the frame it was defined in. The frame is held weakly: it holds the macro.
  Value make_macro(const Node& n, const FramePtr& defined_in_frame, const std::string& name = "") {
    const Node* node = &n;
    const std::string macro_name = name.empty() ? n.name : name;
    std::weak_ptr<Frame> defined_in = defined_in_frame;
    const bool takes_varargs = reads_name(node->bodies[0], "varargs");
    const bool takes_kwargs = reads_name(node->bodies[0], "kwargs");
    return Value(std::make_shared<Callable>(Callable{macro_name, [this, node, defined_in, macro_name, takes_varargs,
                                                                  takes_kwargs](const CallArgs& a) {
      if (++call_depth_ > kMaxCallDepth) {
        --call_depth_;
        fail("macro calls nested deeper than " + std::to_string(kMaxCallDepth) + " (endless recursion?)");
      }
      struct Depth {
        int& d;
        ~Depth() { --d; }
      } depth{call_depth_};
      const int saved_line = line_;
      auto f = std::make_shared<Frame>();
      f->parent = defined_in.lock();
      if (!f->parent) fail("macro '" + macro_name + "' was called after the scope it was defined in ended");
      // A body that reads `varargs` / `kwargs` takes extra positional / keyword arguments.
      List varargs;
      auto kwargs = std::make_shared<Dict>();
      if (a.positional.size() > node->targets.size() && !takes_varargs)
        fail("macro '" + macro_name + "' takes not more than " + std::to_string(node->targets.size()) + " argument(s)");
      std::vector<bool> set(node->targets.size(), false);
      for (std::size_t i = 0; i < a.positional.size(); ++i) {
        if (i >= node->targets.size()) {
          varargs.push_back(a.positional[i]);
          continue;
        }
        f->vars[node->targets[i]] = a.positional[i];
        set[i] = true;
      }
      if (takes_varargs) f->vars["varargs"] = Value(std::move(varargs), /*tuple=*/true);
      if (takes_kwargs) f->vars["kwargs"] = Value(kwargs);
      for (const auto& [k, v] : a.keyword) {
        std::size_t i = 0;
        while (i < node->targets.size() && node->targets[i] != k) ++i;
        if (i == node->targets.size()) {
          if (k == "caller") {
            f->vars["caller"] = v;
            continue;
          }
          if (takes_kwargs) {
            kwargs->set(k, v);
            continue;
          }
          fail("macro '" + macro_name + "' has no argument '" + k + "'");
        }
        if (set[i]) fail("macro '" + macro_name + "' got multiple values for argument '" + k + "'");
        f->vars[k] = v;
        set[i] = true;
      }
      for (std::size_t i = 0; i < node->targets.size(); ++i) {
        if (set[i]) continue;
        f->vars[node->targets[i]] = node->args[i] ? eval(*node->args[i], f)
                                                  : Value::undefined("parameter '" + node->targets[i] + "' was not provided");
      }
      std::string out;
      exec_body(node->bodies[0], f, out);
      line_ = saved_line;
      return Value(std::move(out));
    }}));
  }

  // ---- expressions ----

  CallArgs eval_args(const Node& n, const FramePtr& frame) {
    CallArgs a;
    for (const auto& arg : n.args) a.positional.push_back(eval(*arg, frame));
    for (const auto& [k, v] : n.kwargs) a.keyword.emplace_back(k, eval(*v, frame));
    return a;
  }

  // A filter chain whose innermost input is null ({% filter %}, {% set x | f %}) applied to v.
  Value apply_filters(const Node& chain, const Value& v, const FramePtr& frame) {
    const Value input = chain.object ? apply_filters(*chain.object, v, frame) : v;
    CallArgs a = eval_args(chain, frame);
    line_ = chain.line;
    return find_filter(chain.name)(input, a);
  }

  Value eval(const Node& n, const FramePtr& frame) {
    step(n);
    switch (n.kind) {
      case Node::Kind::kLiteral: return n.value;
      case Node::Kind::kName: {
        if (const Value* v = frame->lookup(n.name)) return *v;
        return global(n.name, options_);
      }
      case Node::Kind::kList:
      case Node::Kind::kTuple: {
        List items;
        for (const auto& a : n.args) items.push_back(eval(*a, frame));
        return Value(std::move(items), n.kind == Node::Kind::kTuple);
      }
      case Node::Kind::kDict: {
        auto d = std::make_shared<Dict>();
        for (std::size_t i = 0; i + 1 < n.args.size(); i += 2) {
          const Value k = eval(*n.args[i], frame);
          line_ = n.line;
          if (!k.is_string()) fail("dict keys must be strings in chat templates, got " + k.type_name());
          d->set(k.as_string(), eval(*n.args[i + 1], frame));
        }
        return Value(d);
      }
      case Node::Kind::kGetAttr: {
        const Value obj = eval(*n.object, frame);
        line_ = n.line;
        return get_attribute(obj, n.name);
      }
      case Node::Kind::kGetItem: {
        const Value obj = eval(*n.object, frame);
        const Value key = eval(*n.args[0], frame);
        line_ = n.line;
        return get_item(obj, key);
      }
      case Node::Kind::kSlice: {
        const Value obj = eval(*n.object, frame);
        Value parts[3];
        for (int i = 0; i < 3; ++i)
          if (n.args[static_cast<std::size_t>(i)]) parts[i] = eval(*n.args[static_cast<std::size_t>(i)], frame);
        line_ = n.line;
        return get_slice(obj, parts[0], parts[1], parts[2]);
      }
      case Node::Kind::kCall: {
        const Value callee = eval(*n.object, frame);
        CallArgs a = eval_args(n, frame);
        line_ = n.line;
        require_defined(callee);
        if (callee.is_dict() && callee.as_dict().call) return callee.as_dict().call->fn(a);
        if (!callee.is_callable()) fail("'" + callee.type_name() + "' object is not callable");
        return callee.as_callable().fn(a);
      }
      case Node::Kind::kFilter: {
        const Value input = eval(*n.object, frame);
        CallArgs a = eval_args(n, frame);
        line_ = n.line;
        return find_filter(n.name)(input, a);
      }
      case Node::Kind::kTest: {
        const Value input = eval(*n.object, frame);
        CallArgs a = eval_args(n, frame);
        line_ = n.line;
        return Value(find_test(n.name)(input, a) != n.negated);
      }
      case Node::Kind::kUnary: {
        const Value v = eval(*n.object, frame);
        line_ = n.line;
        if (n.ops[0] == "not") return Value(!truthy(v));
        return unary_op(n.ops[0], v);
      }
      case Node::Kind::kBinary: {
        const std::string& op = n.ops[0];
        const Value a = eval(*n.args[0], frame);
        if (op == "and") return truthy(a) ? eval(*n.args[1], frame) : a;
        if (op == "or") return truthy(a) ? a : eval(*n.args[1], frame);
        const Value b = eval(*n.args[1], frame);
        line_ = n.line;
        return binary_op(op, a, b);
      }
      case Node::Kind::kCompare: {
        Value left = eval(*n.object, frame);
        for (std::size_t i = 0; i < n.ops.size(); ++i) {
          const Value right = eval(*n.args[i], frame);
          line_ = n.line;
          const std::string& op = n.ops[i];
          bool r;
          if (op == "==") r = equal(left, right);
          else if (op == "!=") r = !equal(left, right);
          else if (op == "in") r = contains(right, left);
          else if (op == "notin") r = !contains(right, left);
          else {
            require_defined(left);
            require_defined(right);
            if (op == "<") r = less(left, right);
            else if (op == ">") r = less(right, left);
            else if (op == "<=") r = !less(right, left);
            else r = !less(left, right);
          }
          if (!r) return Value(false);
          left = right;
        }
        return Value(true);
      }
      case Node::Kind::kCondExpr: {
        if (truthy(eval(*n.args[0], frame))) return eval(*n.args[1], frame);
        if (n.args[2]) return eval(*n.args[2], frame);
        return Value::undefined("the inline if-expression evaluated to false and no else section was defined");
      }
      default: fail("internal error: a statement where an expression was expected");
    }
  }

  const std::string& name_;
  const RenderOptions& options_;
  std::size_t steps_ = 0;
  int call_depth_ = 0;
  int line_ = 1;
};

}  // namespace

Template::Template(const std::string& source, std::string name) : name_(std::move(name)) {
  auto parsed = std::make_shared<Parsed>();
  parsed->body = parse_template(source, name_);
  check_names(parsed->body, name_);
  parsed_ = std::move(parsed);
}

Template::~Template() = default;
Template::Template(const Template&) = default;
Template& Template::operator=(const Template&) = default;

std::string Template::render(const Value& context, const RenderOptions& options) const {
  Interpreter interpreter(name_, options);
  return interpreter.run(parsed_->body, context);
}

}  // namespace grpo::core::jinja
