// The plugin host: loads plugin libraries (Boost.DLL, RTLD_NOW | RTLD_LOCAL), checks the
// ABI handshake, keeps a registry of components by kind and name, and constructs them from
// their configuration.
//
// Lifetime: a library, once loaded, stays mapped until the process exits (never dlclosed),
// and every object handed out also holds a reference to its library, so a component may
// outlive the registry that created it.
// Thread safety: every member function is safe to call concurrently (one internal lock);
// plugin entry points and registration run under that lock.
#pragma once

#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/plugin/search_path.h"
#include "grpo/sdk/config_value.h"
#include "grpo/sdk/plugin.h"
#include "grpo/sdk/verifier.h"

namespace grpo::core {

// A plugin failed to load, a component name did not resolve, or a factory failed.
class PluginError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ComponentInfo {
  sdk::ComponentKind kind;
  std::string name;
  std::string description;
  std::string plugin;          // the plugin's name
  std::string plugin_version;  // components carry their plugin's version
  std::string file;            // the library path
  bool uses_torch = false;
};

struct PluginInfo {
  std::string name;
  std::string version;
  std::string description;
  std::string file;
  std::string sdk_version;
  std::string compiler;
  std::uint32_t abi_major = 0;
  std::uint32_t abi_minor = 0;
  std::vector<ComponentInfo> components;
};

struct PluginLoadFailure {
  std::string file;
  std::string message;
};

class PluginRegistry {
 public:
  explicit PluginRegistry(PluginSearchPath search_path = {});
  ~PluginRegistry();
  PluginRegistry(const PluginRegistry&) = delete;
  PluginRegistry& operator=(const PluginRegistry&) = delete;

  const PluginSearchPath& search_path() const { return search_path_; }

  // Loads one plugin file. Loading the same file again is a no-op. Throws PluginError; a
  // failed load registers nothing.
  PluginInfo load_file(const std::string& path);
  // Finds libgrpo_<plugin_name>.so on the search path and loads it. Throws PluginError.
  PluginInfo load_plugin(const std::string& plugin_name);
  // Loads a `plugins.load` entry: a path (contains '/' or ends in .so) or a plugin name.
  PluginInfo load(const std::string& path_or_name);
  // Loads every libgrpo_*.so on the search path; returns the failures (others still load).
  std::vector<PluginLoadFailure> load_all();

  std::vector<PluginInfo> plugins() const;
  // Sorted by kind, then name.
  std::vector<ComponentInfo> components() const;

  // Resolves `name` ("component" or "plugin/component") for `kind`, loading plugins from
  // the search path as needed, and constructs the component from `config` (a map node, or
  // nullptr for all defaults). `key_path` is where the node sits in the config
  // ("verifiers[0]"), used in every message. Keys listed in `host_keys` belong to the host
  // (e.g. "name", "weight"); any other key the factory did not read is an unknown option.
  // Throws PluginError (resolution, load, factory failure) or sdk::ConfigError (the
  // component rejected its configuration, or an unknown option). `plugin_abi_minor`, when
  // given, receives the ABI minor the providing plugin was built for: interface functions
  // appended in a later minor exist only in objects of plugins of that minor or newer.
  std::shared_ptr<void> create(sdk::ComponentKind kind, const std::string& name, const sdk::ConfigValue* config,
                               const std::string& key_path, const std::vector<std::string>& host_keys = {"name"},
                               std::uint32_t* plugin_abi_minor = nullptr);

  template <class Interface>
  std::shared_ptr<Interface> create(const std::string& name, const sdk::ConfigValue* config,
                                    const std::string& key_path,
                                    const std::vector<std::string>& host_keys = {"name"}) {
    return std::static_pointer_cast<Interface>(
        create(sdk::ComponentTraits<Interface>::kind, name, config, key_path, host_keys));
  }

  std::shared_ptr<sdk::Verifier> create_verifier(const std::string& name, const sdk::ConfigValue* config,
                                                 const std::string& key_path) {
    return create<sdk::Verifier>(name, config, key_path, verifier_host_keys());
  }

  // The keys of a `verifiers` entry that belong to the host, not to the verifier.
  static std::vector<std::string> verifier_host_keys() { return {"name", "weight", "label"}; }
  // The keys of a `tools` entry that belong to the host.
  static std::vector<std::string> tool_host_keys() { return {"name", "as"}; }

  struct Library;  // a mapped plugin file (opaque; process-wide, never unloaded)

 private:
  struct Component;
  class RegistrarImpl;

  PluginInfo load_file_locked(const std::string& path);
  const Component* resolve_locked(sdk::ComponentKind kind, const std::string& name, const std::string& key_path);
  const Component* find_locked(sdk::ComponentKind kind, const std::string& plugin, const std::string& name) const;
  std::vector<std::string> names_of_kind_locked(sdk::ComponentKind kind) const;
  std::vector<PluginLoadFailure> load_all_locked();

  PluginSearchPath search_path_;
  mutable std::recursive_mutex mutex_;
  std::vector<PluginInfo> plugins_;
  std::vector<std::unique_ptr<Component>> components_;
  std::vector<PluginLoadFailure> discovery_failures_;
  bool discovered_all_ = false;
};

// The host's own ABI facts, for messages and --version.
std::string host_abi_string();  // "1.1"

}  // namespace grpo::core
