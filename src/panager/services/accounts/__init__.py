"""Accounts a person connects to outside providers: the contract, connections, sealing."""
