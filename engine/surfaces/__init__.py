"""Ways into the engine besides the Python API: the ``tandem`` command line and the MCP server."""
