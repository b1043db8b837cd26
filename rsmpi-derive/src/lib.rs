//! `#[derive(Equivalence)]`: lets a plain-data struct travel in rsmpi messages.
//!
//! The struct must also be `bytemuck::Pod` (derive `Pod` and `Zeroable`, `#[repr(C)]`,
//! no padding), which guarantees that its bytes are exactly its value; the derive
//! then implements `rsmpi::Equivalence`, and checks at compile time that every field
//! is itself `Equivalence`.
#![forbid(unsafe_code)]

use proc_macro::TokenStream;
use quote::quote;
use syn::{parse_macro_input, Data, DeriveInput, Fields};

#[proc_macro_derive(Equivalence)]
pub fn derive_equivalence(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    let name = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let fields: Vec<_> = match &input.data {
        Data::Struct(s) => match &s.fields {
            Fields::Named(f) => f.named.iter().map(|f| f.ty.clone()).collect(),
            Fields::Unnamed(f) => f.unnamed.iter().map(|f| f.ty.clone()).collect(),
            Fields::Unit => vec![],
        },
        _ => {
            return syn::Error::new_spanned(
                &input.ident,
                "Equivalence can only be derived for structs",
            )
            .to_compile_error()
            .into()
        }
    };
    quote! {
        impl #impl_generics ::rsmpi::Equivalence for #name #ty_generics #where_clause {}
        const _: () = {
            fn assert_field<T: ::rsmpi::Equivalence>() {}
            #[allow(dead_code)]
            fn assert_fields #impl_generics () #where_clause { #( assert_field::<#fields>(); )* }
        };
    }
    .into()
}
