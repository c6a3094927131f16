"""The safe filesystem layer: directory-fd-relative access that never follows a symlink component."""
