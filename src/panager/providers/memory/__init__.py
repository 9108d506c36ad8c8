"""The in-memory provider (tests, demos): what one provider package looks like."""
