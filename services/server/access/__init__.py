"""Who may connect and how much: tokens, authentication, the credential gate, admission, limits."""
