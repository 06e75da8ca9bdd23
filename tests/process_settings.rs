//! Process-wide settings set in code (`ProcessSettings`), in a process of their own: they take
//! the place of their variables until the crate reads them, and not after.

use gpu_dot::{kernel_cache_dir, ProcessSettings, ENV_CACHE_DIR, ENV_HOST_THREADS};

#[test]
fn settings_in_code_take_the_place_of_variables_until_read() {
    let dir = std::env::temp_dir().join(format!("gpu-dot-in-code-{}", std::process::id()));
    // Given twice, the last value counts.
    ProcessSettings::new()
        .no_cache()
        .cache_dir(&dir)
        .host_threads(3)
        .apply()
        .expect("nothing was read yet");
    assert_eq!(kernel_cache_dir(), Some(dir.clone()));
    // The cache folder has been read now: a later value is refused, whole.
    let refused = ProcessSettings::new()
        .host_threads(2)
        .no_cache()
        .apply()
        .expect_err("the cache folder was read");
    assert_eq!(refused.var, ENV_CACHE_DIR);
    assert!(refused.to_string().contains(ENV_CACHE_DIR), "{refused}");
    assert_eq!(kernel_cache_dir(), Some(dir));
    // The helper count was not read: it may still change.
    assert_ne!(refused.var, ENV_HOST_THREADS);
    ProcessSettings::new()
        .host_threads(2)
        .apply()
        .expect("the helper count was not read yet");
}
