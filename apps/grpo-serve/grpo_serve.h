// grpo-serve: an OpenAI-compatible HTTP server over the native engine for a model folder, a
// checkpoint or a run directory (docs/serving.md). The server itself is server.h; this is the
// command line.
#pragma once

namespace grpo::cli {

// Exit codes: apps/cli/exit_codes.h (docs/cli.md#grpo-serve says which).
int grpo_serve_main(int argc, char** argv);

}  // namespace grpo::cli
