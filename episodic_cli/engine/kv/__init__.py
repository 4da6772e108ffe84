"""KV blocks: their bytes, the keeper that offers them to the store's tier, and their keys' moves."""
