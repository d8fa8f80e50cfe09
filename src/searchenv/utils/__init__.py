"""Small helpers shared by both packages (no heavy imports)."""
