"""Examples that are Python packages (the others here are C++/CUDA source folders)."""
