"""What ckptio's calls return, public for callers that keep or type them: a Checkpointer's save (Saved) and load
(Loaded, its `last`), a TieredCheckpointer's save (TierSave) and load (Restored, its `last`, with the copies it
Skipped on the way)."""

from .loading import Loaded
from .saving import Saved
from .tier_records import Restored, Skipped, TierSave

__all__ = ["Loaded", "Restored", "Saved", "Skipped", "TierSave"]
