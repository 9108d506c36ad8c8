"""Services: the domain logic over PostgreSQL. Each takes the pool and returns typed values."""
