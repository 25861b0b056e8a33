//! Argo CD's Lua health checks, run in an embedded Lua 5.4 (the `mlua` crate, Lua built from source)
//! with no file, OS or network access and limits on time and memory.
//!
//! Each evaluation gets a fresh interpreter, so one object's run cannot leak into another's. What a
//! script sees follows Argo CD's `util/lua`: the object as the global `obj`; the base library, `table`
//! and a safe `os` (`clock`, `date`, `difftime`, `time`) always; with `useOpenLibs` also `string`,
//! `math`, `coroutine` and `utf8`. Argo CD's open libraries also include `io` and `debug`; those stay
//! closed here, as do `load`, `loadfile`, `dofile` and `string.dump`, and `print` writes nothing. The
//! script returns a table whose `status` is a health code and whose `message` is a string; any other
//! answer, a runtime error, running past [`TIME_LIMIT`] or allocating past [`MEMORY_LIMIT`] makes the
//! object Unknown with the reason.

use std::time::{Duration, Instant};

use capstan_health::{Health, HealthCode};
use mlua::{HookTriggers, Lua, LuaOptions, LuaSerdeExt, StdLib, Table, Value as LuaValue, VmState};
use serde_json::Value;

/// The longest a script may run for one object. Argo CD allows 1 s; a health check runs for every
/// object of its kind on every reconcile, so Capstan allows less.
pub const TIME_LIMIT: Duration = Duration::from_millis(250);

/// The most memory one evaluation's interpreter may hold, the object's own tables included.
pub const MEMORY_LIMIT: usize = 64 << 20;

/// How often (in virtual-machine instructions) the time limit is checked.
const HOOK_EVERY: u32 = 1000;

/// The functions of Lua's `os` library a health check may call (Argo CD's `oslib_safe`).
const SAFE_OS: &[&str] = &["clock", "date", "difftime", "time"];

/// Base-library functions removed from every interpreter: they read files or run arbitrary chunks.
const REMOVED_GLOBALS: &[&str] = &["dofile", "loadfile", "load", "loadstring", "collectgarbage"];

/// One compiled Lua health check.
#[derive(Debug)]
pub struct LuaRule {
    /// The ConfigMap key it came from, for messages.
    key: String,
    script: String,
    open_libs: bool,
}

impl LuaRule {
    /// A rule from `script`, checked to compile. `key` names it in messages.
    pub fn new(key: &str, script: &str, open_libs: bool) -> Result<LuaRule, String> {
        let lua = sandbox(open_libs).map_err(|e| format!("the Lua interpreter did not start: {e}"))?;
        lua.load(script)
            .set_name(key)
            .set_mode(mlua::chunk::ChunkMode::Text)
            .into_function()
            .map_err(|e| format!("the Lua script does not compile: {}", first_line(&e.to_string())))?;
        Ok(LuaRule {
            key: key.to_string(),
            script: script.to_string(),
            open_libs,
        })
    }

    /// The script's verdict on `obj`; Unknown with the reason when it fails.
    pub fn assess(&self, obj: &Value) -> Health {
        match self.run(obj) {
            Ok(health) => health,
            Err(message) => Health::new(
                HealthCode::Unknown,
                format!("custom health rule {}: {message}", self.key),
            ),
        }
    }

    fn run(&self, obj: &Value) -> Result<Health, String> {
        let lua = sandbox(self.open_libs).map_err(|e| format!("the Lua interpreter did not start: {e}"))?;
        let start = Instant::now();
        lua.set_hook(HookTriggers::new().every_nth_instruction(HOOK_EVERY), move |_, _| {
            if start.elapsed() > TIME_LIMIT {
                Err(mlua::Error::runtime(format!(
                    "ran longer than {} ms",
                    TIME_LIMIT.as_millis()
                )))
            } else {
                Ok(VmState::Continue)
            }
        })
        .map_err(|e| e.to_string())?;
        let options = mlua::serde::SerializeOptions::new()
            .serialize_none_to_null(false)
            .serialize_unit_to_null(false)
            .set_array_metatable(false);
        let object = lua.to_value_with(obj, options).map_err(|e| {
            format!(
                "the object does not fit the Lua interpreter: {}",
                first_line(&e.to_string())
            )
        })?;
        lua.globals().set("obj", object).map_err(|e| e.to_string())?;
        let answer: LuaValue = lua
            .load(&self.script)
            .set_name(&self.key)
            .set_mode(mlua::chunk::ChunkMode::Text)
            .eval()
            .map_err(|e| first_line(&e.to_string()))?;
        verdict(answer)
    }
}

/// The health a script's answer stands for, as Argo CD reads it.
fn verdict(answer: LuaValue) -> Result<Health, String> {
    let LuaValue::Table(table) = answer else {
        return Err(format!(
            "expect table output from Lua script, not {}",
            answer.type_name()
        ));
    };
    let status = match table.raw_get::<LuaValue>("status").map_err(|e| e.to_string())? {
        LuaValue::String(s) => s.to_string_lossy(),
        LuaValue::Nil => String::new(),
        other => return Err(format!("status is a {}, not a string", other.type_name())),
    };
    let message = match table.raw_get::<LuaValue>("message").map_err(|e| e.to_string())? {
        LuaValue::String(s) => s.to_string_lossy(),
        LuaValue::Nil => String::new(),
        other => return Err(format!("message is a {}, not a string", other.type_name())),
    };
    Ok(match HealthCode::parse(&status) {
        Some(code) => Health::new(code, message),
        // Argo CD's answer to a status that is not a health code.
        None => Health::new(HealthCode::Unknown, "Lua returned an invalid health status"),
    })
}

/// A fresh interpreter with only the libraries a health check may use.
fn sandbox(open_libs: bool) -> mlua::Result<Lua> {
    let mut libs = StdLib::TABLE | StdLib::OS;
    if open_libs {
        libs |= StdLib::STRING | StdLib::MATH | StdLib::COROUTINE | StdLib::UTF8;
    }
    let lua = Lua::new_with(libs, LuaOptions::new())?;
    lua.set_memory_limit(MEMORY_LIMIT)?;
    let globals = lua.globals();
    for name in REMOVED_GLOBALS {
        globals.raw_remove(*name)?;
    }
    globals.raw_set("print", lua.create_function(|_, _: mlua::MultiValue| Ok(()))?)?;
    let os: Table = globals.raw_get("os")?;
    let safe_os = lua.create_table()?;
    for name in SAFE_OS {
        safe_os.raw_set(*name, os.raw_get::<LuaValue>(*name)?)?;
    }
    globals.raw_set("os", safe_os)?;
    if let Ok(string) = globals.raw_get::<Table>("string") {
        string.raw_remove("dump")?;
    }
    // `require` gives the libraries already open (Argo CD preloads its safe `os`), nothing from disk.
    let require =
        lua.create_function(
            |lua, name: String| match lua.globals().raw_get::<LuaValue>(name.as_str())? {
                LuaValue::Table(t)
                    if ["os", "table", "string", "math", "coroutine", "utf8"].contains(&name.as_str()) =>
                {
                    Ok(LuaValue::Table(t))
                }
                _ => Err(mlua::Error::runtime(format!("module '{name}' not found"))),
            },
        )?;
    globals.raw_set("require", require)?;
    drop(globals);
    Ok(lua)
}

/// The first line of an error (Lua's tracebacks follow it).
fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").to_string()
}
