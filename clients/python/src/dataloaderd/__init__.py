"""dataloaderd client."""
