//! How a room declares a metric label vocabulary: every label value the code can
//! emit is a variant of an enum declared with [`label_values!`], so the enum's `ALL`
//! lists them for registration at start and `label()` is the one spelling of each.
//! The vocabularies live with what they count (`error`, `forward`, `alerts`,
//! `provider`, `serve`, the embedded store).

/// An enum of metric label values, with `ALL` (every variant, in declaration order)
/// and `label()`. Declared through this macro, a variant cannot lack its label nor be
/// left out of `ALL`, so [`register_families`] registers every value the code emits.
/// Attributes (docs, derives, `#[error]`) pass through to the enum and its variants.
macro_rules! label_values {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident => $label:literal, )+
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The metric label value.
            pub fn label(&self) -> &'static str {
                match self {
                    $( $name::$variant => $label, )+
                }
            }
        }
    };
}
pub(crate) use label_values;
