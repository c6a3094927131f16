"""Layer 3, recording: what a session leaves on disk and everything read back from it — events, the shadow store, moments, replay, rescore, integrity, timeline, curve, packing."""
