//! Argo CD's Lua health checks, run in an embedded Lua 5.4 (the `mlua` crate, Lua built from source)
//! with no file, OS or network access and limits on time and memory.
//!
//! Each evaluation gets a fresh interpreter, so one object's run cannot leak into another's. What a
//! script sees follows Argo CD's `util/lua`: the object as the global `obj`; the base library, `table`
//! and a safe `os` (`clock`, `date`, `difftime`, `time`) always; with `useOpenLibs` also `string`,
//! `math` and `utf8`. Argo CD's open libraries also include `io`, `debug` and `coroutine` (whose
//! threads would run without the time limit's hook); those stay closed here, as do `load`,
//! `loadfile`, `dofile`, `loadstring`, `collectgarbage` and `string.dump`, and `print` writes nothing. The
//! script returns a table whose `status` is a health code and whose `message` is a string; any other
//! answer, a runtime error, running past [`TIME_LIMIT`] or allocating past [`MEMORY_LIMIT`] makes the
//! object Unknown with the reason. Catching errors with `pcall` or `xpcall` does not outlive the
//! time limit, and the library functions that loop in C (`table.move`,
//! `string.rep`, the pattern functions) get bounds on their arguments. Each evaluation runs on a
//! thread of its own (module `bounded`): a rule stuck where nothing can interrupt it is quarantined.

use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan_health::{Health, HealthCode};
use mlua::{HookTriggers, Lua, LuaOptions, LuaSerdeExt, StdLib, Table, Value as LuaValue, VmState};
use serde_json::Value;

use crate::bounded::{self, Quarantine};

/// The longest a script may run for one object. Argo CD allows 1 s; a health check runs for every
/// object of its kind on every reconcile, so Capstan allows less.
pub const TIME_LIMIT: Duration = Duration::from_millis(250);

/// The longest a caller waits for an evaluation: the time limit, and room for a machine so busy that
/// the evaluation's thread starts late. Past it the rule is quarantined.
pub const WAIT_LIMIT: Duration = Duration::from_secs(2);

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
    key: Arc<str>,
    script: Arc<str>,
    open_libs: bool,
    quarantine: Quarantine,
}

impl LuaRule {
    /// A rule from `script`, checked to compile. `key` names it in messages.
    pub fn new(key: &str, script: &str, open_libs: bool) -> Result<LuaRule, String> {
        let lua = sandbox(open_libs, Instant::now() + TIME_LIMIT)
            .map_err(|e| format!("the Lua interpreter did not start: {e}"))?;
        lua.load(script)
            .set_name(key)
            .set_mode(mlua::chunk::ChunkMode::Text)
            .into_function()
            .map_err(|e| format!("the Lua script does not compile: {}", first_line(&e.to_string())))?;
        Ok(LuaRule {
            key: key.into(),
            script: script.into(),
            open_libs,
            quarantine: Quarantine::default(),
        })
    }

    /// The script's verdict on `obj`; Unknown with the reason when it fails. Run on a thread of its
    /// own, waited for at most [`WAIT_LIMIT`] (see module `bounded`).
    pub fn assess(&self, obj: &Value) -> Health {
        let (key, script, open_libs, obj) = (self.key.clone(), self.script.clone(), self.open_libs, obj.clone());
        let answer = bounded::run(WAIT_LIMIT, &self.quarantine, move || {
            run(&key, &script, open_libs, &obj)
        });
        match answer.and_then(|a| a) {
            Ok(health) => health,
            Err(message) => Health::new(
                HealthCode::Unknown,
                format!("custom health rule {}: {message}", self.key),
            ),
        }
    }
}

fn run(key: &str, script: &str, open_libs: bool, obj: &Value) -> Result<Health, String> {
    let deadline = Instant::now() + TIME_LIMIT;
    let lua = sandbox(open_libs, deadline).map_err(|e| format!("the Lua interpreter did not start: {e}"))?;
    lua.set_hook(HookTriggers::new().every_nth_instruction(HOOK_EVERY), move |_, _| {
        if Instant::now() > deadline {
            Err(mlua::Error::runtime(timed_out()))
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
        .load(script)
        .set_name(key)
        .set_mode(mlua::chunk::ChunkMode::Text)
        .eval()
        .map_err(|e| first_line(&e.to_string()))?;
    verdict(answer)
}

fn timed_out() -> String {
    format!("ran longer than {} ms", TIME_LIMIT.as_millis())
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

/// Lua run once in every interpreter, given a function telling whether the deadline has passed: the
/// functions that catch errors re-raise once it has (else `while true do pcall(loop) end` would never
/// end), and the library functions that loop in C, where the instruction-count hook never runs, get
/// bounds on their arguments.
const GUARDS: &str = r#"
local expired, message = ...
local pack, unpack, type, error = table.pack, table.unpack, type, error
local function guard(catching)
  return function(...)
    local r = pack(catching(...))
    if expired() then error(message, 0) end
    return unpack(r, 1, r.n)
  end
end
pcall = guard(pcall)
xpcall = guard(xpcall)
local move = table.move
table.move = function(a1, f, e, t, a2)
  if type(f) == "number" and type(e) == "number" and e - f > 100000 then
    error("table.move: at most 100000 elements", 2)
  end
  return move(a1, f, e, t, a2)
end
if string then
  local rep = string.rep
  string.rep = function(s, n, sep)
    local size = (type(s) == "string" and #s or 0) + (type(sep) == "string" and #sep or 0)
    if type(n) == "number" and (n > 16777216 or n * size > 16777216) then
      error("string.rep: at most 16 MiB", 2)
    end
    return rep(s, n, sep)
  end
  for _, name in ipairs({"find", "match", "gmatch", "gsub"}) do
    local f = string[name]
    string[name] = function(s, ...)
      if type(s) == "string" and #s > 65536 then
        error("string." .. name .. ": subjects of at most 64 KiB", 2)
      end
      return f(s, ...)
    end
  end
end
"#;

/// A fresh interpreter with only the libraries a health check may use, guarded for `deadline`.
fn sandbox(open_libs: bool, deadline: Instant) -> mlua::Result<Lua> {
    let mut libs = StdLib::TABLE | StdLib::OS;
    if open_libs {
        libs |= StdLib::STRING | StdLib::MATH | StdLib::UTF8;
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
                LuaValue::Table(t) if ["os", "table", "string", "math", "utf8"].contains(&name.as_str()) => {
                    Ok(LuaValue::Table(t))
                }
                _ => Err(mlua::Error::runtime(format!("module '{name}' not found"))),
            },
        )?;
    globals.raw_set("require", require)?;
    let expired = lua.create_function(move |_, ()| Ok(Instant::now() > deadline))?;
    lua.load(GUARDS)
        .set_name("capstan-guards")
        .set_mode(mlua::chunk::ChunkMode::Text)
        .call::<()>((expired, timed_out()))?;
    drop(globals);
    Ok(lua)
}

/// The first line of an error (Lua's tracebacks follow it).
fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").to_string()
}
