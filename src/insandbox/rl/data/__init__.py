"""Context tasks from public reading-comprehension data (`insandbox rl build-data`)."""
