"""CLI verb groups. Shared argument helpers live in `common`."""
