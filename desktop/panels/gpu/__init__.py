"""The GPU side panel: a recorded or live benchmark report, counted transfers and the block sweep."""
