//! With the `ibverbs` feature: compiles the C shim (src/shim.c) against the system's
//! verbs headers. libibverbs is not linked: the shim opens it with dlopen at run time.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "ibverbs")]
    {
        println!("cargo:rerun-if-changed=src/shim.c");
        cc::Build::new()
            .file("src/shim.c")
            .warnings(true)
            .extra_warnings(true)
            .compile("rsmpi_verbs_shim");
        println!("cargo:rustc-link-lib=dl");
    }
}
