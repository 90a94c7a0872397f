//! Import circles between a crate's modules, read from its source.
//!
//! A module that names another depends on it; two sibling modules that depend on each other,
//! directly or around a longer loop, can no longer be understood, tested or moved one at a
//! time. [`ModuleGraph::read`] reads every `.rs` file under a crate's `src/`, and
//! [`ModuleGraph::circles`] lists every such loop, naming its files and the line of each step.
//!
//! ## The rule
//!
//! Modules are the files and folders under `src/` (`a.rs`, `a/mod.rs`, `a.rs` beside `a/`) and
//! the inline modules inside them (`mod tests { … }`); `lib.rs` and `main.rs` are the root.
//! Circles are looked for among **siblings** (the children of one module) at every depth: a
//! file deep inside a folder that names something in the folder's sibling is a step from the
//! folder to that sibling, as the folder stands for all it holds.
//!
//! - A mention is a path that starts at `crate::`, `super::` or `self::` (or `$crate::`), and,
//!   in a `use` declaration, at a child module's name (`use child::Item;` in a parent).
//! - Mentions count in code and in doc comments (`///`, `//!`, `/** */`, `/*! */`): an
//!   intra-doc link such as ``[`Plan`](super::plan::Plan)`` ties the docs of one module to
//!   another as surely as code does (so a low module's docs link down, not up: a type names
//!   what it stands on, and the item that uses it links to it). Ordinary comments and string
//!   literals do not count.
//! - A path is followed through modules and through the names a module imports with `use`
//!   (public or not: a child can name its parent's private imports). It lands in the last
//!   module it reaches: `super::Thing` lands in the parent when the parent defines `Thing`,
//!   but in the sibling `plan` when the parent only has `pub use plan::Thing;`, exactly as
//!   `super::plan::Thing` and `crate::a::plan::Thing` do.
//! - A module naming its own ancestor (a child using what its parent defines) or its own
//!   descendant (a parent using its children) is normal Rust and no step. Any other mention
//!   is a step between the two siblings below the modules' closest common ancestor.
//! - Names brought in by a glob (`use super::*;`) are not followed, and paths that start at an
//!   imported name rather than at `crate`, `super` or `self` add nothing: the `use` that
//!   brought the name in was already counted.
//!
//! ```
//! use tollgate_testkit::modules::ModuleGraph;
//!
//! let graph = ModuleGraph::from_sources(
//!     "src".as_ref(),
//!     [
//!         ("lib.rs", "mod store;"),
//!         ("store/mod.rs", "mod plan; mod script; pub use plan::Plan;"),
//!         ("store/plan.rs", "pub struct Plan(crate::store::script::Script);"),
//!         ("store/script.rs", "pub struct Script(Option<Box<super::Plan>>);"),
//!     ],
//! );
//! let circles = graph.circles();
//! assert_eq!(circles.len(), 1);
//! assert_eq!(circles[0].names(), ["plan", "script"]);
//! assert!(circles[0].to_string().starts_with(
//!     "src/store/plan.rs -> src/store/script.rs -> src/store/plan.rs"
//! ));
//! ```

mod circles;
mod lex;
mod scan;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use scan::{FileScan, scan};

/// The identifiers the code of `source` names, each with its line, in order: not its comments,
/// doc comments or literals. What a test that a module must not name some item reads.
///
/// ```
/// let names = tollgate_testkit::modules::identifiers(
///     "// Strikes\nlet s = \"Strikes\"; /* Strikes */ let n = MAX_KEY_BYTES;",
/// );
/// let names: Vec<&str> = names.iter().map(|(_, name)| name.as_str()).collect();
/// assert_eq!(names, ["let", "s", "let", "n", "MAX_KEY_BYTES"]);
/// ```
pub fn identifiers(source: &str) -> Vec<(usize, String)> {
    lex::tokens(source)
        .into_iter()
        .filter_map(|token| match token.kind {
            lex::Kind::Ident(name) => Some((token.line, name)),
            _ => None,
        })
        .collect()
}

/// A module's path below the crate root (empty for the root).
type ModPath = Vec<String>;

/// A crate's modules and the steps between siblings, read from its source.
#[derive(Debug)]
pub struct ModuleGraph {
    /// The folder the files were read from, as given (it prefixes every file named).
    src: PathBuf,
    /// Where each module is written.
    sites: BTreeMap<ModPath, Site>,
    /// Each step between siblings: the parent, the two children, and the mentions making it.
    steps: BTreeMap<ModPath, BTreeMap<String, BTreeMap<String, Vec<Mention>>>>,
}

/// Where a module is written.
#[derive(Debug, Clone)]
enum Site {
    /// A file of its own, relative to `src`.
    File(PathBuf),
    /// An inline module in a file, opening on a line.
    Inline(PathBuf, usize),
}

/// One path that names another module, where it is written.
#[derive(Debug, Clone)]
struct Mention {
    /// The file, relative to `src`.
    file: PathBuf,
    /// Its line.
    line: usize,
    /// The path as written.
    path: String,
}

/// A loop of sibling modules, each naming the next and the last naming the first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Circle {
    /// The modules' parent, as a path below the crate root (`["store", "redis"]`).
    parent: Vec<String>,
    /// The siblings in the loop's order, by name.
    names: Vec<String>,
    /// How each appears in a message: its file or folder.
    shown: Vec<String>,
    /// For each sibling, one mention of the next: `file:line names path`.
    evidence: Vec<String>,
    /// When more siblings reach one another than the loop goes through, all of them (shown):
    /// every one is in some loop, and the group is only free of circles once none is.
    group: Vec<String>,
}

impl Circle {
    /// The modules' common parent, as a path of module names below the crate root (empty for
    /// top-level modules).
    pub fn parent(&self) -> &[String] {
        &self.parent
    }

    /// The sibling modules in the loop's order, by module name, the first not repeated at the
    /// end.
    pub fn names(&self) -> &[String] {
        &self.names
    }
}

impl fmt::Display for Circle {
    /// `a -> b -> a`, by files, then one line per step saying where it is written.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for shown in &self.shown {
            write!(f, "{shown} -> ")?;
        }
        write!(f, "{}", self.shown[0])?;
        for line in &self.evidence {
            write!(f, "\n    {line}")?;
        }
        if self.group.len() > self.names.len() {
            write!(
                f,
                "\n    (in a group of {} that reach one another:",
                self.group.len()
            )?;
            for shown in &self.group {
                write!(f, " {shown}")?;
            }
            write!(f, ")")?;
        }
        Ok(())
    }
}

impl ModuleGraph {
    /// Reads every `.rs` file under `src` (a crate's `src/` folder).
    ///
    /// # Errors
    ///
    /// When a folder or a file cannot be read.
    pub fn read(src: &Path) -> std::io::Result<Self> {
        let mut files = Vec::new();
        let mut folders = vec![src.to_owned()];
        while let Some(folder) = folders.pop() {
            for entry in std::fs::read_dir(&folder)? {
                let path = entry?.path();
                if path.is_dir() {
                    folders.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let text = std::fs::read_to_string(&path)?;
                    let relative = path.strip_prefix(src).unwrap_or(&path).to_owned();
                    files.push((relative, text));
                }
            }
        }
        Ok(Self::build(src, files))
    }

    /// The graph of the given files, each a path relative to `src` (`"store/mod.rs"`) and its
    /// text: for tests of the rule itself, with no files on disk.
    pub fn from_sources<'a>(
        src: &Path,
        files: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Self {
        let files = files
            .into_iter()
            .map(|(path, text)| (PathBuf::from(path), text.to_owned()))
            .collect();
        Self::build(src, files)
    }

    fn build(src: &Path, mut files: Vec<(PathBuf, String)>) -> Self {
        files.sort();
        let mut sites = BTreeMap::new();
        let mut scans: Vec<(PathBuf, ModPath, FileScan)> = Vec::new();
        for (file, text) in files {
            let module = file_module(&file);
            let found = scan(&text);
            for (scope, line) in &found.inline {
                let inner = [module.clone(), scope.clone()].concat();
                sites.insert(inner, Site::Inline(file.clone(), *line));
            }
            // `lib.rs` before `main.rs`: the root is shown as the library's.
            sites
                .entry(module.clone())
                .or_insert_with(|| Site::File(file.clone()));
            scans.push((file, module, found));
        }
        let resolver = Resolver::new(&sites, &scans);
        let mut steps: BTreeMap<ModPath, BTreeMap<String, BTreeMap<String, Vec<Mention>>>> =
            BTreeMap::new();
        for (file, module, found) in &scans {
            for spelled in &found.paths {
                let from = [module.clone(), spelled.scope.clone()].concat();
                let Some(target) = resolver.absolute(&from, &spelled.segments) else {
                    continue;
                };
                let to = resolver.land(&target);
                let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
                if common == from.len() || common == to.len() {
                    continue;
                }
                steps
                    .entry(from[..common].to_vec())
                    .or_default()
                    .entry(from[common].clone())
                    .or_default()
                    .entry(to[common].clone())
                    .or_default()
                    .push(Mention {
                        file: file.clone(),
                        line: spelled.line,
                        path: spelled.segments.join("::"),
                    });
            }
        }
        Self {
            src: src.to_owned(),
            sites,
            steps,
        }
    }

    /// The children of the module at `parent` (a path of names below the crate root; empty
    /// for the root), each with the siblings it names.
    pub fn siblings(&self, parent: &[&str]) -> BTreeMap<String, BTreeSet<String>> {
        let parent: ModPath = parent.iter().map(|s| (*s).to_owned()).collect();
        let mut children: BTreeMap<String, BTreeSet<String>> = self
            .sites
            .keys()
            .filter(|m| m.len() == parent.len() + 1 && m.starts_with(&parent))
            .map(|m| (m[parent.len()].clone(), BTreeSet::new()))
            .collect();
        for (from, tos) in self.steps.get(&parent).into_iter().flatten() {
            children
                .entry(from.clone())
                .or_default()
                .extend(tos.keys().cloned());
        }
        children
    }

    /// Every loop among siblings, at every depth: one circle for each group of siblings that
    /// reach one another (the shortest loop through its first module by name).
    pub fn circles(&self) -> Vec<Circle> {
        let mut found = Vec::new();
        for (parent, steps) in &self.steps {
            let next = |from: &str| -> Vec<String> {
                steps
                    .get(from)
                    .map(|tos| tos.keys().cloned().collect())
                    .unwrap_or_default()
            };
            for (group, names) in circles::loops(steps.keys().cloned().collect(), next) {
                let module = |name: &String| [parent.clone(), vec![name.clone()]].concat();
                let shown = names.iter().map(|n| self.show(&module(n))).collect();
                let evidence = names
                    .iter()
                    .zip(names.iter().cycle().skip(1))
                    .map(|(from, to)| {
                        let mention = &steps[from][to][0];
                        format!(
                            "{}:{} names {}",
                            self.src.join(&mention.file).display(),
                            mention.line,
                            mention.path
                        )
                    })
                    .collect();
                found.push(Circle {
                    parent: parent.clone(),
                    names,
                    shown,
                    evidence,
                    group: group.iter().map(|n| self.show(&module(n))).collect(),
                });
            }
        }
        found
    }

    /// A module as a message names it: its file, or its folder when it has one.
    fn show(&self, module: &ModPath) -> String {
        let has_children = self.sites.iter().any(|(m, site)| {
            m.len() > module.len() && m.starts_with(module) && matches!(site, Site::File(_))
        });
        match self.sites.get(module) {
            Some(Site::Inline(file, line)) => format!(
                "{} (mod {} on line {line})",
                self.src.join(file).display(),
                module.last().map_or("", String::as_str)
            ),
            Some(Site::File(file)) if has_children => {
                let folder = self.src.join(module.join("/"));
                if file.ends_with("mod.rs") {
                    format!("{}/", folder.display())
                } else {
                    format!("{} + {}/", self.src.join(file).display(), folder.display())
                }
            }
            Some(Site::File(file)) => self.src.join(file).display().to_string(),
            None => module.join("::"),
        }
    }
}

/// The module a file holds: `a/b.rs` and `a/b/mod.rs` hold `a::b`; `lib.rs` and `main.rs`
/// the root.
fn file_module(file: &Path) -> ModPath {
    let mut module: ModPath = file
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if module.last().is_some_and(|last| last == "mod") {
        module.pop();
    }
    if module == ["lib"] || module == ["main"] {
        module.clear();
    }
    module
}

/// Follows paths through the module tree and the names modules import.
struct Resolver<'a> {
    sites: &'a BTreeMap<ModPath, Site>,
    /// Each module's imported names and the absolute paths they stand for.
    imports: BTreeMap<ModPath, BTreeMap<String, ModPath>>,
}

impl<'a> Resolver<'a> {
    fn new(sites: &'a BTreeMap<ModPath, Site>, scans: &[(PathBuf, ModPath, FileScan)]) -> Self {
        let mut resolver = Self {
            sites,
            imports: BTreeMap::new(),
        };
        for (_, module, found) in scans {
            for import in &found.imports {
                let scope = [module.clone(), import.scope.clone()].concat();
                if let Some(target) = resolver.absolute(&scope, &import.path) {
                    resolver
                        .imports
                        .entry(scope)
                        .or_default()
                        .insert(import.name.clone(), target);
                }
            }
        }
        resolver
    }

    /// The path `segments`, written in module `scope`, from the crate root; none when it
    /// names another crate.
    fn absolute(&self, scope: &[String], segments: &[String]) -> Option<ModPath> {
        let first = segments.first()?;
        let mut at = scope.to_vec();
        let mut rest = segments;
        match first.as_str() {
            "crate" => {
                at.clear();
                rest = &rest[1..];
            }
            "self" | "super" => {
                while let Some(word) = rest.first() {
                    match word.as_str() {
                        "self" => {}
                        "super" => {
                            at.pop()?;
                        }
                        _ => break,
                    }
                    rest = &rest[1..];
                }
            }
            // A bare first segment is a child module (`use child::Item;`), or another crate.
            name => {
                let child = [scope.to_vec(), vec![name.to_owned()]].concat();
                if !self.sites.contains_key(&child) {
                    return None;
                }
            }
        }
        Some([at, rest.to_vec()].concat())
    }

    /// The last module the absolute path reaches, through modules and imported names.
    fn land(&self, path: &[String]) -> ModPath {
        let mut path = path.to_vec();
        let mut at: ModPath = Vec::new();
        let mut index = 0;
        // Imports can only loop in code that does not compile; the bound keeps that finite.
        let mut hops = 0;
        while let Some(segment) = path.get(index) {
            let child = [at.clone(), vec![segment.clone()]].concat();
            if self.sites.contains_key(&child) {
                at = child;
                index += 1;
            } else if let Some(target) = self.imports.get(&at).and_then(|m| m.get(segment))
                && hops < 64
            {
                hops += 1;
                path = [target.clone(), path[index + 1..].to_vec()].concat();
                at.clear();
                index = 0;
            } else {
                break;
            }
        }
        at
    }
}

#[cfg(test)]
mod tests;
