"""Provider tests: the contract suite every provider passes, and its drivers."""
