"""Model backends: loading (hub, local path, packaged GGUF) and Lightning inference."""
