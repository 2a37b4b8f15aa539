#include "core/plugin/plugin_registry.h"

#include <torch/version.h>

#include <algorithm>
#include <boost/dll/shared_library.hpp>
#include <cstddef>
#include <filesystem>
#include <map>
#include <set>
#include <spdlog/spdlog.h>

#include "core/plugin/plugin_log.h"
#include "core/util/strings.h"

namespace grpo::core {

namespace fs = std::filesystem;

std::string host_abi_string() {
  return std::to_string(GRPO_SDK_ABI_MAJOR) + "." + std::to_string(GRPO_SDK_ABI_MINOR);
}

namespace {

// "1.13.1" -> "1.13": LibTorch's C++ ABI is stable within a minor release only.
std::string major_minor(const std::string& version) {
  std::size_t first = version.find('.');
  if (first == std::string::npos) return version;
  std::size_t second = version.find('.', first + 1);
  return version.substr(0, second);
}

bool valid_name(const std::string& name) {
  if (name.empty()) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
  });
}

bool valid_kind(sdk::ComponentKind kind) {
  switch (kind) {
    case sdk::ComponentKind::kVerifier:
    case sdk::ComponentKind::kAdvantage:
    case sdk::ComponentKind::kPolicyLoss:
    case sdk::ComponentKind::kKlEstimator:
    case sdk::ComponentKind::kRolloutBackend:
    case sdk::ComponentKind::kTool: return true;
  }
  return false;
}

// The ABI minor that introduced a kind: a plugin built for an older minor cannot have meant it.
std::uint32_t kind_abi_minor(sdk::ComponentKind kind) { return kind == sdk::ComponentKind::kTool ? 2 : 0;
}

std::string canonical_path(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::canonical(path, ec);
  return ec ? fs::absolute(path, ec).string() : p.string();
}

const sdk::HostInfo& host_info() {
  static const sdk::HostInfo info = [] {
    sdk::HostInfo h;
    h.torch_version = TORCH_VERSION;
    h.log = &host_log_callback;
    return h;
  }();
  return info;
}

// The manifest fields that every ABI major-1 plugin has, whatever its minor: later minors
// append fields after register_components.
constexpr std::size_t kManifestSizeV1_0 =
    offsetof(sdk::PluginManifest, register_components) + sizeof(sdk::RegisterFn);

}  // namespace

// A loaded shared object. Process-wide and never unloaded: objects created by a plugin run
// code from it until their last reference goes, possibly during static destruction.
struct PluginRegistry::Library {
  std::string file;  // canonical path
  boost::dll::shared_library handle;
  const sdk::PluginManifest* manifest = nullptr;
  std::string not_a_plugin;  // set when the file has no entry point: every load repeats it
};

struct PluginRegistry::Component {
  sdk::ComponentKind kind;
  std::string name;
  std::string description;
  std::string torch_version;
  const void* user_factory = nullptr;
  sdk::FactoryInvoker invoke = nullptr;
  std::string plugin;
  std::string plugin_version;
  std::shared_ptr<Library> library;

  ComponentInfo info() const {
    return ComponentInfo{kind, name, description, plugin, plugin_version, library->file, !torch_version.empty()};
  }
};

namespace {

using LibraryCache = std::map<std::string, std::shared_ptr<PluginRegistry::Library>>;

}  // namespace

// Collects one plugin's registrations; nothing reaches the registry unless all are valid.
class PluginRegistry::RegistrarImpl final : public sdk::Registrar {
 public:
  const sdk::HostInfo& host() const override { return host_info(); }

  void add_component(const sdk::ComponentDescriptor& d) override {
    Component c;
    c.kind = d.kind;
    c.name = d.name ? d.name : "";
    c.description = d.description ? d.description : "";
    c.torch_version = d.torch_version ? d.torch_version : "";
    c.user_factory = d.user_factory;
    c.invoke = d.invoke;
    if (!valid_kind(d.kind)) {
      errors.push_back("component '" + c.name + "' has an unknown kind (" + std::to_string(static_cast<unsigned>(d.kind)) + ")");
      return;
    }
    const std::string what = std::string(sdk::component_kind_name(c.kind)) + " '" + c.name + "'";
    if (plugin_abi_minor < kind_abi_minor(c.kind)) {
      errors.push_back(what + ": the " + sdk::component_kind_name(c.kind) + " kind exists since SDK ABI " +
                       std::to_string(GRPO_SDK_ABI_MAJOR) + "." + std::to_string(kind_abi_minor(c.kind)) +
                       ", but the plugin declares ABI " + std::to_string(GRPO_SDK_ABI_MAJOR) + "." +
                       std::to_string(plugin_abi_minor));
      return;
    }
    if (!valid_name(c.name)) {
      errors.push_back("invalid component name '" + c.name + "': use letters, digits, '_', '.', '-'");
      return;
    }
    if (!c.invoke || !c.user_factory) {
      errors.push_back(what + " has no factory");
      return;
    }
    if (!c.torch_version.empty() && major_minor(c.torch_version) != major_minor(TORCH_VERSION)) {
      errors.push_back(what + " was built against LibTorch " + c.torch_version + " but this host uses LibTorch " +
                       TORCH_VERSION + "; rebuild the plugin against LibTorch " + major_minor(TORCH_VERSION));
      return;
    }
    for (const auto& p : pending) {
      if (p.kind == c.kind && p.name == c.name) {
        errors.push_back("duplicate component name: " + what + " is registered twice by this plugin");
        return;
      }
    }
    pending.push_back(std::move(c));
  }

  void report_error(const char* message) override {
    errors.push_back(std::string("registration failed: ") + (message ? message : "(no message)"));
  }

  std::uint32_t plugin_abi_minor = GRPO_SDK_ABI_MINOR;  // the manifest's
  std::vector<Component> pending;
  std::vector<std::string> errors;
};

namespace {
// Libraries stay loaded for the life of the process (intentionally leaked: no dlclose, not
// even during static destruction, when plugin objects may still be alive).
LibraryCache& library_cache() {
  static auto* cache = new LibraryCache();
  return *cache;
}
std::mutex& library_cache_mutex() {
  static auto* m = new std::mutex();
  return *m;
}
}  // namespace

PluginRegistry::PluginRegistry(PluginSearchPath search_path) : search_path_(std::move(search_path)) {}
PluginRegistry::~PluginRegistry() = default;

PluginInfo PluginRegistry::load_file(const std::string& path) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  return load_file_locked(path);
}

// Long because it is the plugin contract's checks in the order a loader must make them (the
// file, dlopen, the entry symbol, the ABI and host versions, the manifest, each component's
// descriptor, then registration with rollback): split, the order would be spread over helpers.
PluginInfo PluginRegistry::load_file_locked(const std::string& path) {
  const std::string file = canonical_path(path);
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) throw PluginError("plugin file '" + path + "' does not exist or is not a file");
  for (const auto& p : plugins_)
    if (p.file == file) return p;

  // 1. Map the library (or reuse the process-wide mapping).
  std::shared_ptr<Library> lib;
  {
    std::lock_guard<std::mutex> cache_lock(library_cache_mutex());
    auto it = library_cache().find(file);
    if (it != library_cache().end()) {
      lib = it->second;
    } else {
      auto fresh = std::make_shared<Library>();
      fresh->file = file;
      boost::dll::fs::error_code load_error;
      fresh->handle.load(file, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local, load_error);
      if (load_error) {
        const char* detail = ::dlerror();
        throw PluginError("cannot load plugin '" + file + "': " + (detail ? std::string(detail) : load_error.message()));
      }
      if (!fresh->handle.has(GRPO_PLUGIN_ENTRY_SYMBOL)) {
        fresh->not_a_plugin = "'" + file + "' is not a grpo plugin: it does not export the entry symbol '" +
                              GRPO_PLUGIN_ENTRY_SYMBOL + "' (define it with GRPO_PLUGIN(...) from <grpo/sdk/plugin.h>)";
      } else {
        auto entry = fresh->handle.get<const sdk::PluginManifest*()>(GRPO_PLUGIN_ENTRY_SYMBOL);
        fresh->manifest = entry();
      }
      library_cache()[file] = fresh;  // stays mapped: never unloaded once loaded
      lib = fresh;
    }
  }
  if (!lib->not_a_plugin.empty()) throw PluginError(lib->not_a_plugin);
  if (!lib->manifest) throw PluginError("'" + file + "' is not a grpo plugin: its entry point returned no manifest");
  const sdk::PluginManifest& m = *lib->manifest;

  // 2. Handshake. Only magic, ABI major/minor and manifest size are read before the major
  //    is known to match: a different major may lay out the rest differently.
  if (m.magic != GRPO_PLUGIN_MAGIC)
    throw PluginError("'" + file + "' is not a grpo plugin: bad manifest magic");
  const std::string plugin_abi = std::to_string(m.abi_major) + "." + std::to_string(m.abi_minor);
  if (m.abi_major != GRPO_SDK_ABI_MAJOR)
    throw PluginError("plugin '" + file + "': ABI major version mismatch: the plugin was built for grpo SDK ABI " +
                      plugin_abi + ", this host implements ABI " + host_abi_string() +
                      "; rebuild the plugin against SDK ABI " + std::to_string(GRPO_SDK_ABI_MAJOR) + ".x");
  if (m.abi_minor > GRPO_SDK_ABI_MINOR)
    throw PluginError("plugin '" + file + "': ABI minor version too new: the plugin was built for grpo SDK ABI " +
                      plugin_abi + ", this host implements ABI " + host_abi_string() +
                      " (a plugin may be older than the host, not newer); upgrade grpo or rebuild the plugin "
                      "against SDK ABI " + host_abi_string());
  if (m.manifest_size < kManifestSizeV1_0)
    throw PluginError("plugin '" + file + "': manifest is " + std::to_string(m.manifest_size) +
                      " bytes, expected at least " + std::to_string(kManifestSizeV1_0) + " for ABI " + plugin_abi);
  const std::string plugin_name = m.name ? m.name : "";
  const std::string label = "plugin '" + plugin_name + "' (" + file + ")";
  if (m.cxx11_abi != static_cast<std::uint32_t>(GRPO_SDK_CXX11_ABI))
    throw PluginError(label + ": C++ standard library ABI mismatch: the plugin was built with _GLIBCXX_USE_CXX11_ABI=" +
                      std::to_string(m.cxx11_abi) + ", the host with _GLIBCXX_USE_CXX11_ABI=" +
                      std::to_string(GRPO_SDK_CXX11_ABI));
  {
    std::uint32_t host_count = 0;
    const sdk::TypeLayout* host_layouts = sdk::detail::boundary_layouts(&host_count);
    for (std::uint32_t i = 0; i < host_count; ++i) {
      const sdk::TypeLayout& h = host_layouts[i];
      const sdk::TypeLayout* p = nullptr;
      for (std::uint32_t j = 0; j < m.num_layouts && m.layouts; ++j)
        if (m.layouts[j].name && std::string(m.layouts[j].name) == h.name) p = &m.layouts[j];
      if (!p) {
        if (m.abi_minor == GRPO_SDK_ABI_MINOR)
          throw PluginError(label + ": ABI layout table lacks " + h.name + " (corrupt manifest)");
        continue;  // an older minor predates this type
      }
      // The manifest and HostInfo only grow (append-only within a major): an older minor's
      // are smaller, which the manifest_size check above already bounds.
      const bool append_only = std::string(h.name) == "grpo::sdk::PluginManifest" || std::string(h.name) == "grpo::sdk::HostInfo";
      if (append_only && m.abi_minor < GRPO_SDK_ABI_MINOR) continue;
      if (p->size != h.size || p->align != h.align)
        throw PluginError(label + ": ABI mismatch: sizeof/alignof(" + h.name + ") is " + std::to_string(p->size) + "/" +
                          std::to_string(p->align) + " in the plugin but " + std::to_string(h.size) + "/" +
                          std::to_string(h.align) + " in the host; rebuild the plugin with the same compiler, "
                          "standard library and SDK headers (plugin compiler: " + (m.compiler ? m.compiler : "?") + ")");
    }
  }
  if (!valid_name(plugin_name))
    throw PluginError("plugin '" + file + "': invalid plugin name '" + plugin_name + "': use letters, digits, '_', '.', '-'");
  for (const auto& p : plugins_)
    if (p.name == plugin_name)
      throw PluginError(label + ": a plugin named '" + plugin_name + "' is already loaded from '" + p.file + "'");
  if (!m.register_components) throw PluginError(label + ": manifest has no registration function");

  // 3. Registration, all or nothing.
  RegistrarImpl registrar;
  registrar.plugin_abi_minor = m.abi_minor;
  m.register_components(registrar);
  std::vector<std::string> errors = registrar.errors;
  for (const auto& c : registrar.pending) {
    for (const auto& existing : components_) {
      if (existing->kind == c.kind && existing->name == c.name) {
        errors.push_back("duplicate component name: " + std::string(sdk::component_kind_name(c.kind)) + " '" + c.name +
                         "' is already registered by plugin '" + existing->plugin + "' (" + existing->library->file + ")");
      }
    }
  }
  if (!errors.empty()) throw PluginError(label + ": " + join(errors, "; "));

  PluginInfo info;
  info.name = plugin_name;
  info.version = m.version ? m.version : "";
  info.description = m.description ? m.description : "";
  info.file = file;
  info.sdk_version = m.sdk_version ? m.sdk_version : "";
  info.compiler = m.compiler ? m.compiler : "";
  info.abi_major = m.abi_major;
  info.abi_minor = m.abi_minor;
  for (auto& c : registrar.pending) {
    auto component = std::make_unique<Component>(std::move(c));
    component->plugin = info.name;
    component->plugin_version = info.version;
    component->library = lib;
    info.components.push_back(component->info());
    components_.push_back(std::move(component));
  }
  plugins_.push_back(info);
  spdlog::debug("loaded plugin '{}' {} from {} ({} components)", info.name, info.version, file, info.components.size());
  return info;
}

PluginInfo PluginRegistry::load_plugin(const std::string& plugin_name) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  for (const auto& p : plugins_)
    if (p.name == plugin_name) return p;
  auto file = search_path_.find_plugin_file(plugin_name);
  if (!file)
    throw PluginError("plugin '" + plugin_name + "': " + plugin_file_name(plugin_name) + " not found in the plugin search path [" +
                      join(search_path_.directories(), ", ") + "] (add a folder with plugins.paths or GRPO_PLUGIN_PATH)");
  PluginInfo info = load_file_locked(*file);
  if (info.name != plugin_name)
    spdlog::warn("plugin file '{}' declares the name '{}', not '{}'", *file, info.name, plugin_name);
  return info;
}

PluginInfo PluginRegistry::load(const std::string& path_or_name) {
  if (path_or_name.find('/') != std::string::npos || ends_with(path_or_name, ".so")) return load_file(path_or_name);
  return load_plugin(path_or_name);
}

std::vector<PluginLoadFailure> PluginRegistry::load_all() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  return load_all_locked();
}

std::vector<PluginLoadFailure> PluginRegistry::load_all_locked() {
  std::vector<PluginLoadFailure> failures;
  for (const auto& file : search_path_.all_plugin_files()) {
    try {
      load_file_locked(file);
    } catch (const PluginError& e) {
      failures.push_back({file, e.what()});
    }
  }
  discovered_all_ = true;
  discovery_failures_ = failures;
  return failures;
}

std::vector<PluginInfo> PluginRegistry::plugins() const {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  return plugins_;
}

std::vector<ComponentInfo> PluginRegistry::components() const {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  std::vector<ComponentInfo> out;
  for (const auto& c : components_) out.push_back(c->info());
  std::sort(out.begin(), out.end(), [](const ComponentInfo& a, const ComponentInfo& b) {
    if (a.kind != b.kind) return static_cast<unsigned>(a.kind) < static_cast<unsigned>(b.kind);
    return a.name < b.name;
  });
  return out;
}

const PluginRegistry::Component* PluginRegistry::find_locked(sdk::ComponentKind kind, const std::string& plugin,
                                                             const std::string& name) const {
  for (const auto& c : components_)
    if (c->kind == kind && c->name == name && (plugin.empty() || c->plugin == plugin)) return c.get();
  return nullptr;
}

std::vector<std::string> PluginRegistry::names_of_kind_locked(sdk::ComponentKind kind) const {
  std::vector<std::string> names;
  for (const auto& c : components_)
    if (c->kind == kind) names.push_back(c->name);
  std::sort(names.begin(), names.end());
  return names;
}

const PluginRegistry::Component* PluginRegistry::resolve_locked(sdk::ComponentKind kind, const std::string& name,
                                                                const std::string& key_path) {
  const std::string kind_name = sdk::component_kind_name(kind);
  std::string plugin, component = name;
  if (std::size_t slash = name.find('/'); slash != std::string::npos) {
    plugin = name.substr(0, slash);
    component = name.substr(slash + 1);
    if (plugin.empty() || component.empty() || component.find('/') != std::string::npos)
      throw PluginError(key_path + ": '" + name + "' is not a valid component name (expected 'name' or 'plugin/name')");
  }
  if (const Component* c = find_locked(kind, plugin, component)) return c;

  // Not registered yet: load the plugin named after it (libgrpo_<plugin or name>.so), then,
  // for an unqualified name, every plugin on the search path.
  const std::string file_plugin = plugin.empty() ? component : plugin;
  bool loaded_by_name = false;
  for (const auto& p : plugins_) loaded_by_name = loaded_by_name || p.name == file_plugin;
  if (!loaded_by_name && search_path_.find_plugin_file(file_plugin)) {
    try {
      load_plugin(file_plugin);
    } catch (const PluginError& e) {
      throw PluginError(key_path + ": " + e.what());
    }
  }
  if (const Component* c = find_locked(kind, plugin, component)) return c;
  if (!plugin.empty()) {
    if (!search_path_.find_plugin_file(plugin) && !loaded_by_name) {
      try {
        load_plugin(plugin);
      } catch (const PluginError& e) {
        throw PluginError(key_path + ": " + e.what());
      }
    }
    std::vector<std::string> names;
    for (const auto& c : components_)
      if (c->plugin == plugin && c->kind == kind) names.push_back(c->name);
    throw PluginError(key_path + ": plugin '" + plugin + "' has no " + kind_name + " named '" + component + "'" +
                      did_you_mean(component, names) + "; its " + kind_name + " components: [" + join(names, ", ") + "]");
  }
  if (!discovered_all_) load_all_locked();
  if (const Component* c = find_locked(kind, plugin, component)) return c;

  const std::vector<std::string> available = names_of_kind_locked(kind);
  std::string message = key_path + ": no " + kind_name + " named '" + component + "'" + did_you_mean(component, available) +
                        ". Available " + kind_name + " components: [" + join(available, ", ") +
                        "]. Plugin search path: [" + join(search_path_.directories(), ", ") + "]";
  if (!discovery_failures_.empty()) {
    message += ". Plugins that failed to load:";
    for (const auto& f : discovery_failures_) message += "\n  " + f.message;
  }
  throw PluginError(message);
}

namespace {

// After a factory returns: every option it never read is unknown.
void reject_unread_options(const sdk::ConfigValue& node, const std::string& path, const std::string& component) {
  if (node.is_map()) {
    for (const auto& e : node.entries()) {
      const std::string key_path = path + "." + e.key;
      if (!e.value.used()) {
        const sdk::SourceLocation& loc = e.key_location.known() ? e.key_location : e.value.location();
        const std::string where = loc.known() ? loc.to_string() + ": " : "";
        std::string known = node.queried_keys().empty() ? "none" : join(node.queried_keys(), ", ");
        throw sdk::ConfigError(where + key_path + ": unknown option for " + component +
                               did_you_mean(e.key, node.queried_keys()) + "; options it reads here: [" + known + "]");
      }
      reject_unread_options(e.value, key_path, component);
    }
  } else if (node.is_sequence()) {
    for (std::size_t i = 0; i < node.items().size(); ++i)
      if (node.items()[i].used()) reject_unread_options(node.items()[i], path + "[" + std::to_string(i) + "]", component);
  }
}

}  // namespace

std::shared_ptr<void> PluginRegistry::create(sdk::ComponentKind kind, const std::string& name,
                                             const sdk::ConfigValue* config, const std::string& key_path,
                                             const std::vector<std::string>& host_keys,
                                             std::uint32_t* plugin_abi_minor) {
  const Component* c = nullptr;
  {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    c = resolve_locked(kind, name, key_path);
  }
  // Components are never removed, so `c` stays valid; the factory runs without the lock.
  const std::string label = std::string(sdk::component_kind_name(kind)) + " '" + c->name + "' (plugin '" + c->plugin +
                            "', " + c->library->file + ")";
  const sdk::ConfigValue empty = sdk::ConfigValue::make_map();
  const sdk::ConfigValue* node = (config && !config->is_null()) ? config : &empty;
  if (!node->is_map())
    sdk::ConfigView::fail_at(*node, key_path, std::string("expected a map of options for ") + label + ", got " +
                                                  node->type_description());
  node->reset_usage();
  for (const auto& k : host_keys)
    if (const sdk::ConfigValue* v = node->find(k)) v->mark_used();

  sdk::ConfigView view(node, key_path);
  std::shared_ptr<void> object;
  sdk::Status status = c->invoke(c->user_factory, view, &object);
  if (!status.is_ok()) {
    if (status.code() == sdk::StatusCode::kInvalidArgument)
      throw sdk::ConfigError(status.message() + " [rejected by " + label + "]");
    throw PluginError(key_path + ": cannot create " + label + ": " + status.message());
  }
  if (!object) throw PluginError(key_path + ": cannot create " + label + ": the factory returned no object");
  reject_unread_options(*node, key_path, label);
  if (plugin_abi_minor) *plugin_abi_minor = c->library->manifest->abi_minor;

  // The returned pointer also owns a reference to the library its code lives in.
  struct Holder {
    std::shared_ptr<Library> library;  // declared first: destroyed after the object
    std::shared_ptr<void> object;
  };
  auto holder = std::make_shared<Holder>(Holder{c->library, object});
  return std::shared_ptr<void>(holder, object.get());
}

}  // namespace grpo::core
