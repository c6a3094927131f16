"""Layer 2, scoring: a snapshot of a repo scored in containers under the compat and strict profiles (Python and Java), images, caches, backends (local, Ray), run reports."""
