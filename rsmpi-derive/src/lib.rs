//! `#[derive(Equivalence)]`: lets a struct of [`Equivalence`] fields travel in rsmpi
//! messages, whatever its layout (padding between fields is skipped on the wire).
//!
//! ```ignore
//! use rsmpi::traits::*;          // or `mpi::traits::*` with the dependency renamed
//!
//! #[derive(Equivalence)]
//! struct Opts {
//!     name: [u8; 100],
//!     cycles: u32,
//!     properties: [f64; 20],
//!     origin: Point,             // itself #[derive(Equivalence)]
//! }
//! ```
//!
//! The expansion names the rsmpi crate by the name the using crate gives it in its
//! `Cargo.toml` (found at expansion time, so `mpi = { package = "rsmpi", … }` works);
//! `#[mpi(crate = "path")]` or `#[rsmpi(crate = "path")]` overrides it, for use through
//! a re-export.
#![forbid(unsafe_code)]

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as Tokens};
use proc_macro_crate::{crate_name, FoundCrate};
use quote::quote;
use syn::{parse_macro_input, Data, DeriveInput, Fields, Ident, Index, Member, Type};

#[proc_macro_derive(Equivalence, attributes(mpi, rsmpi))]
pub fn derive_equivalence(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(t) => t.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// The path of the rsmpi crate as the using crate sees it.
fn krate(input: &DeriveInput) -> syn::Result<Tokens> {
    for attr in &input.attrs {
        if attr.path().is_ident("mpi") || attr.path().is_ident("rsmpi") {
            let mut path = None;
            attr.parse_nested_meta(|m| {
                if m.path.is_ident("crate") {
                    let s: syn::LitStr = m.value()?.parse()?;
                    path = Some(s.parse::<syn::Path>()?);
                    Ok(())
                } else {
                    Err(m.error("expected `crate = \"path\"`"))
                }
            })?;
            if let Some(p) = path {
                return Ok(quote!(#p));
            }
        }
    }
    let name = match crate_name("rsmpi") {
        // rsmpi's own tests, examples and doctests (and the library, through
        // `extern crate self as rsmpi`)
        Ok(FoundCrate::Itself) => "rsmpi".to_string(),
        Ok(FoundCrate::Name(n)) => n,
        // not a direct dependency (a re-export): the usual names
        Err(_) => "rsmpi".to_string(),
    };
    let id = Ident::new(&name, Span::call_site());
    Ok(quote!(::#id))
}

/// The type map of a field of type `ty`: arrays (nested to any depth) become
/// contiguous types of their element, as in the `mpi` crate, which has no
/// `Equivalence` for arrays.
fn datatype_of(k: &Tokens, ty: &Type) -> Tokens {
    match ty {
        Type::Array(a) => {
            let (elem, len) = (datatype_of(k, &a.elem), &a.len);
            quote!(#k::datatype::internal::UserDatatype::contiguous((#len) as #k::datatype::Count, &#elem))
        }
        Type::Paren(p) => datatype_of(k, &p.elem),
        _ => {
            quote!(#k::datatype::internal::type_map(&<#ty as #k::datatype::internal::Equivalence>::equivalent_datatype()).clone())
        }
    }
}

fn zero_of(k: &Tokens, ty: &Type) -> Tokens {
    match ty {
        Type::Array(a) => {
            let elem = zero_of(k, &a.elem);
            quote!(::core::array::from_fn(|_| #elem))
        }
        Type::Paren(p) => zero_of(k, &p.elem),
        _ => quote!(<#ty as #k::datatype::internal::Equivalence>::rsmpi_zero()),
    }
}

/// Appends the packed bytes of `place` (an expression of type `&ty`).
fn pack_of(k: &Tokens, ty: &Type, place: Tokens) -> Tokens {
    match ty {
        Type::Array(a) => {
            let inner = pack_of(k, &a.elem, quote!(e));
            quote!(for e in (#place).iter() { #inner })
        }
        Type::Paren(p) => pack_of(k, &p.elem, place),
        _ => {
            quote!(<#ty as #k::datatype::internal::Equivalence>::rsmpi_pack(::core::slice::from_ref(#place), out);)
        }
    }
}

/// Unpacks into `place` (an expression of type `&mut ty`) from `b[at..]`.
fn unpack_of(k: &Tokens, ty: &Type, place: Tokens) -> Tokens {
    match ty {
        Type::Array(a) => {
            let inner = unpack_of(k, &a.elem, quote!(e));
            quote!(for e in (#place).iter_mut() { #inner })
        }
        Type::Paren(p) => unpack_of(k, &p.elem, place),
        _ => {
            quote!(at += <#ty as #k::datatype::internal::Equivalence>::rsmpi_unpack(::core::slice::from_mut(#place), &b[at..]);)
        }
    }
}

fn expand(input: &DeriveInput) -> syn::Result<Tokens> {
    let k = krate(input)?;
    let name = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let Data::Struct(s) = &input.data else {
        return Err(syn::Error::new_spanned(
            &input.ident,
            "Equivalence can only be derived for structs",
        ));
    };
    let (members, types): (Vec<Member>, Vec<syn::Type>) = match &s.fields {
        Fields::Named(f) => f
            .named
            .iter()
            .map(|f| (Member::Named(f.ident.clone().unwrap()), f.ty.clone()))
            .unzip(),
        Fields::Unnamed(f) => f
            .unnamed
            .iter()
            .enumerate()
            .map(|(i, f)| (Member::Unnamed(Index::from(i)), f.ty.clone()))
            .unzip(),
        Fields::Unit => (vec![], vec![]),
    };
    let eq = quote!(#k::datatype::internal::Equivalence);
    let dts: Vec<Tokens> = types.iter().map(|t| datatype_of(&k, t)).collect();
    let zeros: Vec<Tokens> = types.iter().map(|t| zero_of(&k, t)).collect();
    let packs: Vec<Tokens> = types
        .iter()
        .zip(&members)
        .map(|(t, m)| pack_of(&k, t, quote!(&e.#m)))
        .collect();
    let unpacks: Vec<Tokens> = types
        .iter()
        .zip(&members)
        .map(|(t, m)| unpack_of(&k, t, quote!(&mut e.#m)))
        .collect();
    let zero = match &s.fields {
        Fields::Named(_) => quote!(#name { #( #members: #zeros ),* }),
        Fields::Unnamed(_) => quote!(#name ( #( #zeros ),* )),
        Fields::Unit => quote!(#name),
    };
    Ok(quote! {
        impl #impl_generics #eq for #name #ty_generics #where_clause {
            type Out = #k::datatype::internal::UserDatatype;
            fn equivalent_datatype() -> Self::Out {
                #k::datatype::internal::UserDatatype::structure(
                    &[#( (::core::mem::offset_of!(Self, #members), &#dts) ),*],
                    ::core::mem::size_of::<Self>(),
                )
            }
            fn rsmpi_zero() -> Self {
                #zero
            }
            #[allow(unused_variables)]
            fn rsmpi_pack(s: &[Self], out: &mut ::std::vec::Vec<u8>) {
                for e in s {
                    #( #packs )*
                }
            }
            #[allow(unused_variables, unused_mut)]
            fn rsmpi_unpack(s: &mut [Self], b: &[u8]) -> usize {
                let mut at = 0usize;
                for e in s {
                    #( #unpacks )*
                }
                at
            }
        }
    })
}
