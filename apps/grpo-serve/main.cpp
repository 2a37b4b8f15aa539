// grpo-serve: an OpenAI-compatible server over the native engine. A thin main over grpo_serve.cpp.
#include "apps/grpo-serve/grpo_serve.h"

int main(int argc, char** argv) { return grpo::cli::grpo_serve_main(argc, argv); }
