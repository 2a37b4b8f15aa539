"""The benchmark's reward: as cheap as a Python function can be, so that what is measured
is the plugin (batching, JSON, pipes, the sandbox), not the function."""


def reward(completion, ground_truth, **columns):
    return 1.0 if completion.endswith(str(ground_truth)) else 0.0
