//! Process-wide TLS setup: rustls with the ring crypto provider, for HTTPS
//! destinations, the CLI's admin client and `rediss://` stores. Installed once, by
//! whichever of them needs it first.

/// Install the ring provider as the process default (idempotent).
pub fn install_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // An error means a provider is already installed, which is just as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
