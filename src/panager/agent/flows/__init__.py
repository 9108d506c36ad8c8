"""Work built on turns: scheduled delivery, system jobs, the memory tidy-up, linking, and
the replay after an account is connected."""
