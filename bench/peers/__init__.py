"""Peer engines measured side by side with ours (llama.cpp)."""
