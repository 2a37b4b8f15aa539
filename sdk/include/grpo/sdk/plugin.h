// The plugin entry point, the ABI handshake and the Registrar.
//
// A plugin library exports exactly one symbol, `grpo_plugin_entry_v1`, which returns a
// pointer to a static PluginManifest. The host reads the manifest's leading fields
// (magic, ABI major/minor, manifest size) before trusting anything else, checks the
// layout table (sizeof/alignof of every type that crosses the boundary, as compiled by the
// plugin) and `_GLIBCXX_USE_CXX11_ABI`, and only then calls `register_components`, under
// the loader's lock, with a Registrar: once per registry that loads the library (a process
// normally has one).
//
//   #include <grpo/sdk/plugin.h>
//   #include <grpo/sdk/verifier.h>
//
//   class MyReward : public grpo::sdk::Verifier {
//    public:
//     explicit MyReward(const grpo::sdk::ConfigView& cfg) : bonus_(cfg.get_double("bonus", 0.0)) {}
//     grpo::sdk::VerifierResult verify(const grpo::sdk::VerifierInput& in) const override;
//    private:
//     double bonus_;
//   };
//
//   GRPO_PLUGIN("my_reward", "1.0.0", "What it scores") {
//     registrar.add_verifier<MyReward>("my_reward", "One-line description");
//   }
//
// Factories run inside the plugin; every exception they throw is caught there and returned
// to the host as a Status, so no exception crosses the library boundary.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grpo/sdk/config_value.h"
#include "grpo/sdk/config_view.h"
#include "grpo/sdk/log.h"
#include "grpo/sdk/status.h"
#include "grpo/sdk/tool.h"
#include "grpo/sdk/verifier.h"
#include "grpo/sdk/version.h"

#ifndef _GLIBCXX_USE_CXX11_ABI
#define GRPO_SDK_CXX11_ABI 1
#else
#define GRPO_SDK_CXX11_ABI _GLIBCXX_USE_CXX11_ABI
#endif

#define GRPO_PLUGIN_ENTRY_SYMBOL "grpo_plugin_entry_v1"
#define GRPO_PLUGIN_MAGIC 0x4F505247u  // "GRPO" little-endian

GRPO_SDK_NAMESPACE_BEGIN

enum class ComponentKind : std::uint32_t {
  kVerifier = 1,
  kAdvantage = 2,
  kPolicyLoss = 3,
  kKlEstimator = 4,
  kRolloutBackend = 5,
  kTool = 6,  // ABI 1.2: a plugin built for an older minor cannot register one
};

// The spelling used in config files, listings and error messages.
inline const char* component_kind_name(ComponentKind kind) {
  switch (kind) {
    case ComponentKind::kVerifier: return "verifier";
    case ComponentKind::kAdvantage: return "advantage";
    case ComponentKind::kPolicyLoss: return "policy_loss";
    case ComponentKind::kKlEstimator: return "kl_estimator";
    case ComponentKind::kRolloutBackend: return "rollout_backend";
    case ComponentKind::kTool: return "tool";
  }
  return "unknown";
}

// What the host tells the plugin about itself.
struct HostInfo {
  std::uint32_t abi_major = GRPO_SDK_ABI_MAJOR;
  std::uint32_t abi_minor = GRPO_SDK_ABI_MINOR;
  const char* host_version = GRPO_SDK_VERSION_STRING;
  const char* torch_version = "";  // LibTorch version of the host, "" if none
  HostLogFn log = nullptr;
};

// Creates a component: `user_factory` is opaque to the host; `invoke` (compiled inside the
// plugin) calls it, catches every exception, and stores the new object (a pointer to the
// component's interface, type-erased) in `out`.
using FactoryInvoker = Status (*)(const void* user_factory, const ConfigView& config, std::shared_ptr<void>* out);

struct ComponentDescriptor {
  ComponentKind kind = ComponentKind::kVerifier;
  const char* name = "";
  const char* description = "";
  // LibTorch "major.minor.patch" the component was compiled against; nullptr for torch-free
  // kinds (verifiers). The host refuses a component whose major.minor differs from its own.
  const char* torch_version = nullptr;
  const void* user_factory = nullptr;
  FactoryInvoker invoke = nullptr;
};

// Per-interface facts, specialized next to each interface (torch interfaces in sdk/torch/).
template <class Interface>
struct ComponentTraits;

// Torch-side interfaces (defined in grpo/sdk/torch/*.h, which a torch plugin includes).
class AdvantageEstimator;
class PolicyLoss;
class KlEstimator;
class RolloutBackend;

template <>
struct ComponentTraits<Verifier> {
  static constexpr ComponentKind kind = ComponentKind::kVerifier;
  static const char* torch_version() { return nullptr; }
};

template <>
struct ComponentTraits<Tool> {
  static constexpr ComponentKind kind = ComponentKind::kTool;
  static const char* torch_version() { return nullptr; }
};

namespace detail {

template <class Interface>
using FactoryFn = std::shared_ptr<Interface> (*)(const ConfigView&);

template <class Interface>
Status invoke_factory(const void* user_factory, const ConfigView& config, std::shared_ptr<void>* out) noexcept {
  try {
    auto fn = reinterpret_cast<FactoryFn<Interface>>(const_cast<void*>(user_factory));
    std::shared_ptr<Interface> object = fn(config);
    if (!object) return Status::internal("factory returned no object");
    *out = std::static_pointer_cast<void>(object);
    return Status::ok();
  } catch (const ConfigError& e) {
    return Status::invalid_argument(e.what());
  } catch (const std::exception& e) {
    return Status::internal(e.what());
  } catch (...) {
    return Status::internal("unknown exception (not derived from std::exception)");
  }
}

template <class Interface, class Impl>
std::shared_ptr<Interface> construct(const ConfigView& config) {
  return std::make_shared<Impl>(config);
}

}  // namespace detail

// Handed to the plugin's registration function. Implemented by the host.
//
// Thread safety: used only during registration, which the host serializes.
// Names: [A-Za-z0-9_.-]+, unique per kind across every loaded plugin; the host refuses a
// duplicate and fails the plugin's load. Each component is also reachable as
// "<plugin>/<name>".
class Registrar {
 public:
  virtual const HostInfo& host() const = 0;
  // The host copies the strings before returning.
  virtual void add_component(const ComponentDescriptor& descriptor) = 0;
  // Marks registration as failed; the host reports `message` and loads nothing of the plugin.
  virtual void report_error(const char* message) = 0;

  // Registers Impl, constructed as Impl(const ConfigView&), under `name`.
  template <class Interface, class Impl>
  void add(const char* name, const char* description) {
    add<Interface>(name, description, &detail::construct<Interface, Impl>);
  }
  // Registers a factory function (a captureless lambda converts to it).
  template <class Interface>
  void add(const char* name, const char* description, detail::FactoryFn<Interface> factory) {
    ComponentDescriptor d;
    d.kind = ComponentTraits<Interface>::kind;
    d.name = name;
    d.description = description;
    d.torch_version = ComponentTraits<Interface>::torch_version();
    d.user_factory = reinterpret_cast<const void*>(factory);
    d.invoke = &detail::invoke_factory<Interface>;
    add_component(d);
  }

  template <class Impl>
  void add_verifier(const char* name, const char* description) {
    add<Verifier, Impl>(name, description);
  }
  // ABI 1.2. The component's name is the name the policy calls the tool by.
  template <class Impl>
  void add_tool(const char* name, const char* description) {
    add<Tool, Impl>(name, description);
  }
  // The torch kinds: include the matching grpo/sdk/torch/ header first.
  template <class Impl>
  void add_advantage(const char* name, const char* description) {
    add<AdvantageEstimator, Impl>(name, description);
  }
  template <class Impl>
  void add_policy_loss(const char* name, const char* description) {
    add<PolicyLoss, Impl>(name, description);
  }
  template <class Impl>
  void add_kl_estimator(const char* name, const char* description) {
    add<KlEstimator, Impl>(name, description);
  }
  template <class Impl>
  void add_rollout_backend(const char* name, const char* description) {
    add<RolloutBackend, Impl>(name, description);
  }

 protected:
  ~Registrar() = default;
};

// sizeof/alignof of one boundary type, as compiled by the plugin.
struct TypeLayout {
  const char* name;
  std::uint32_t size;
  std::uint32_t align;
};

using RegisterFn = void (*)(Registrar&);

// Layout is append-only within an ABI major: new fields go at the end (and raise the minor).
struct PluginManifest {
  std::uint32_t magic;          // GRPO_PLUGIN_MAGIC
  std::uint32_t abi_major;      // checked before any other field is read
  std::uint32_t abi_minor;
  std::uint32_t manifest_size;  // sizeof(PluginManifest) in the plugin
  const char* name;             // plugin name: libgrpo_<name>.so
  const char* version;          // plugin version, free-form ("1.2.0")
  const char* description;
  const char* sdk_version;      // GRPO_SDK_VERSION_STRING at build time
  const char* compiler;         // __VERSION__ at build time (informational)
  std::uint32_t cxx11_abi;      // _GLIBCXX_USE_CXX11_ABI
  std::uint32_t num_layouts;
  const TypeLayout* layouts;
  RegisterFn register_components;
};

namespace detail {

template <class T>
constexpr TypeLayout layout_of(const char* name) {
  return TypeLayout{name, static_cast<std::uint32_t>(sizeof(T)), static_cast<std::uint32_t>(alignof(T))};
}

// The boundary types. The host compares each entry with its own; names unknown to the host
// are ignored (a newer minor may add some, and is refused on the minor check anyway).
inline const TypeLayout* boundary_layouts(std::uint32_t* count) {
  static const TypeLayout layouts[] = {
      layout_of<PluginManifest>("grpo::sdk::PluginManifest"),
      layout_of<HostInfo>("grpo::sdk::HostInfo"),
      layout_of<ComponentDescriptor>("grpo::sdk::ComponentDescriptor"),
      layout_of<Status>("grpo::sdk::Status"),
      layout_of<SourceLocation>("grpo::sdk::SourceLocation"),
      layout_of<ConfigValue>("grpo::sdk::ConfigValue"),
      layout_of<ConfigEntry>("grpo::sdk::ConfigEntry"),
      layout_of<ConfigView>("grpo::sdk::ConfigView"),
      layout_of<VerifierInput>("grpo::sdk::VerifierInput"),
      layout_of<VerifierResult>("grpo::sdk::VerifierResult"),
      layout_of<ToolCallContext>("grpo::sdk::ToolCallContext"),
      layout_of<ToolObservation>("grpo::sdk::ToolObservation"),
      layout_of<std::string>("std::string"),
      layout_of<std::string_view>("std::string_view"),
      layout_of<std::shared_ptr<void>>("std::shared_ptr<void>"),
      layout_of<std::vector<int>>("std::vector<int>"),
  };
  *count = static_cast<std::uint32_t>(sizeof(layouts) / sizeof(layouts[0]));
  return layouts;
}

inline PluginManifest make_manifest(const char* name, const char* version, const char* description,
                                    RegisterFn register_components) {
  PluginManifest m{};
  m.magic = GRPO_PLUGIN_MAGIC;
  m.abi_major = GRPO_SDK_ABI_MAJOR;
  m.abi_minor = GRPO_SDK_ABI_MINOR;
  m.manifest_size = static_cast<std::uint32_t>(sizeof(PluginManifest));
  m.name = name;
  m.version = version;
  m.description = description;
  m.sdk_version = GRPO_SDK_VERSION_STRING;
  m.compiler = __VERSION__;
  m.cxx11_abi = GRPO_SDK_CXX11_ABI;
  m.layouts = boundary_layouts(&m.num_layouts);
  m.register_components = register_components;
  return m;
}

// Runs the user's registration body inside the plugin: installs the host's log sink and
// turns any exception into Registrar::report_error.
template <void (*Body)(Registrar&)>
void guarded_register(Registrar& registrar) noexcept {
  try {
    plugin_log_sink().fn = registrar.host().log;
    Body(registrar);
  } catch (const std::exception& e) {
    registrar.report_error(e.what());
  } catch (...) {
    registrar.report_error("unknown exception (not derived from std::exception)");
  }
}

}  // namespace detail

GRPO_SDK_NAMESPACE_END

// The one exported symbol. Everything else in a plugin is hidden (see grpo_add_plugin()).
#define GRPO_PLUGIN_EXPORT extern "C" __attribute__((visibility("default")))

// Defines the plugin's entry point; the braces that follow are the registration body, with
// a `registrar` (grpo::sdk::Registrar&) in scope. Use once per library.
#define GRPO_PLUGIN(plugin_name, plugin_version, plugin_description)                                   \
  static void grpo_plugin_register_body_(::grpo::sdk::Registrar& registrar);                           \
  GRPO_PLUGIN_EXPORT const ::grpo::sdk::PluginManifest* grpo_plugin_entry_v1() {                       \
    ::grpo::sdk::detail::plugin_log_sink().plugin = plugin_name;                                       \
    static const ::grpo::sdk::PluginManifest manifest = ::grpo::sdk::detail::make_manifest(            \
        plugin_name, plugin_version, plugin_description,                                               \
        &::grpo::sdk::detail::guarded_register<&grpo_plugin_register_body_>);                          \
    return &manifest;                                                                                  \
  }                                                                                                    \
  static void grpo_plugin_register_body_(::grpo::sdk::Registrar& registrar)
