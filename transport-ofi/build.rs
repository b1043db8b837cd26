//! With the `libfabric` feature: compiles the C shim (src/shim.c) against the system's
//! libfabric headers and links libfabric. Without it: nothing (no C, no link).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "libfabric")]
    {
        println!("cargo:rerun-if-changed=src/shim.c");
        cc::Build::new()
            .file("src/shim.c")
            .warnings(true)
            .extra_warnings(true)
            .compile("rsmpi_ofi_shim");
        println!("cargo:rustc-link-lib=fabric");
    }
}
