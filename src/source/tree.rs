//! Whole-archive validation: walks every member (see [`super::archive`]) and builds an
//! in-memory tree of the paths, which catches what no single member shows: a path that passes
//! through a symlink or a file, a member that appears twice, a hard link to anything but an
//! earlier regular file, and a symlink that escapes the tree by way of other symlinks
//! (`a -> .` then `b -> a/a/..`). Called by [`super::SourceStore::ingest`] and again by
//! [`super::SourceStore::unpack`].

use std::collections::HashMap;

use super::archive::{self, display, invalid, Manifest, Member};
use super::{SourceError, SourceLimits};

/// Linux gives up on a path after following this many symlinks (ELOOP).
const MAX_SYMLINK_HOPS: u32 = 40;
/// The most path components all symlink checks of one archive may step through together.
const RESOLUTION_BUDGET: u64 = 16 * 1024 * 1024;

/// Validates `archive` completely without writing anything.
pub(super) fn validate(archive: &[u8], limits: &SourceLimits) -> Result<Manifest, SourceError> {
    let mut tree = Tree::new();
    let manifest = archive::walk(archive, limits, |checked, _entry| {
        tree.insert(&checked.path, &checked.member)
    })?;
    tree.check_symlinks()?;
    Ok(manifest)
}

#[derive(Debug, PartialEq, Eq)]
enum Kind {
    /// A directory no member names, implied by a member inside it.
    ImpliedDirectory,
    Directory,
    File,
    Symlink(Vec<u8>),
}

struct Node {
    kind: Kind,
    children: HashMap<Vec<u8>, usize>,
}

struct Tree {
    /// Node 0 is the root.
    nodes: Vec<Node>,
    /// Symlink nodes with their paths, in archive order.
    symlinks: Vec<(Vec<u8>, usize)>,
}

impl Tree {
    fn new() -> Tree {
        let root = Node {
            kind: Kind::Directory,
            children: HashMap::new(),
        };
        Tree {
            nodes: vec![root],
            symlinks: Vec::new(),
        }
    }

    /// Adds one member, refusing paths through non-directories and conflicting duplicates.
    fn insert(&mut self, path: &[u8], member: &Member) -> Result<(), SourceError> {
        let name = display(path);
        let components: Vec<&[u8]> = path.split(|byte| *byte == b'/').collect();
        let (last, parents) = components
            .split_last()
            .expect("split yields at least one item");
        let mut current = 0;
        for (index, component) in parents.iter().enumerate() {
            current = match self.nodes[current].children.get(*component) {
                Some(&child) => child,
                None => self.add_child(current, component, Kind::ImpliedDirectory),
            };
            let prefix = || display(&components[..=index].join(&b'/'));
            match self.nodes[current].kind {
                Kind::Directory | Kind::ImpliedDirectory => {}
                Kind::Symlink(_) => {
                    return Err(invalid(format!(
                        "entry '{name}' passes through symlink '{}'",
                        prefix()
                    )))
                }
                Kind::File => {
                    return Err(invalid(format!(
                        "entry '{name}' is beneath '{}', which is not a directory",
                        prefix()
                    )))
                }
            }
        }
        let kind = match member {
            Member::Directory => Kind::Directory,
            Member::File { .. } => Kind::File,
            Member::Symlink { target } => Kind::Symlink(target.clone()),
            Member::HardLink { target } => {
                self.check_hard_link(&name, target)?;
                Kind::File
            }
        };
        let existing = self.nodes[current].children.get(*last).copied();
        match (existing, &kind) {
            (None, _) => {
                let node = self.add_child(current, last, kind);
                if let Kind::Symlink(_) = self.nodes[node].kind {
                    self.symlinks.push((path.to_vec(), node));
                }
                Ok(())
            }
            (Some(node), Kind::Directory) if self.nodes[node].kind == Kind::ImpliedDirectory => {
                self.nodes[node].kind = Kind::Directory;
                Ok(())
            }
            (Some(node), _) if self.nodes[node].kind == Kind::ImpliedDirectory => Err(invalid(
                format!("entry '{name}' is not a directory, but earlier entries are inside it"),
            )),
            (Some(_), _) => Err(invalid(format!("entry '{name}' appears more than once"))),
        }
    }

    fn add_child(&mut self, parent: usize, component: &[u8], kind: Kind) -> usize {
        let node = self.nodes.len();
        self.nodes.push(Node {
            kind,
            children: HashMap::new(),
        });
        self.nodes[parent].children.insert(component.to_vec(), node);
        node
    }

    /// A hard link must name an earlier regular file (or hard link), reached without symlinks.
    fn check_hard_link(&self, name: &str, target: &[u8]) -> Result<(), SourceError> {
        let mut current = Some(0);
        for component in target.split(|byte| *byte == b'/') {
            current = current.and_then(|node| match self.nodes[node].kind {
                Kind::Directory | Kind::ImpliedDirectory => {
                    self.nodes[node].children.get(component).copied()
                }
                _ => None,
            });
        }
        match current.map(|node| &self.nodes[node].kind) {
            Some(Kind::File) => Ok(()),
            _ => Err(invalid(format!(
                "hard link '{name}' points to '{}', which is not an earlier regular file in the archive",
                display(target)
            ))),
        }
    }

    /// Resolves every symlink the way the kernel would, through the other symlinks of the
    /// archive, and refuses any that ends up outside the root.
    fn check_symlinks(&self) -> Result<(), SourceError> {
        let mut budget = RESOLUTION_BUDGET;
        for (path, node) in &self.symlinks {
            let Kind::Symlink(target) = &self.nodes[*node].kind else {
                continue;
            };
            if !self.resolves_inside(path, target, &mut budget)? {
                return Err(invalid(format!(
                    "symlink '{}' points outside the source tree ('{}')",
                    display(path),
                    display(target)
                )));
            }
        }
        Ok(())
    }

    /// Whether following the link at `path` (target `target`) stays inside the tree. Paths
    /// that reach a name the archive does not hold go on lexically; a chain longer than the
    /// kernel follows cannot be opened, so it is harmless.
    fn resolves_inside(
        &self,
        path: &[u8],
        target: &[u8],
        budget: &mut u64,
    ) -> Result<bool, SourceError> {
        // The directory stack from the root: `Some(node)` for a node of the tree, `None` for a
        // name the archive does not hold.
        let mut stack: Vec<Option<usize>> = Vec::new();
        let mut current = Some(0);
        let components: Vec<&[u8]> = path.split(|byte| *byte == b'/').collect();
        for component in &components[..components.len() - 1] {
            current = current.and_then(|node| self.nodes[node].children.get(*component).copied());
            stack.push(current);
        }
        let mut pending: Vec<&[u8]> = target.split(|byte| *byte == b'/').rev().collect();
        let mut hops = 0;
        while let Some(component) = pending.pop() {
            *budget = budget.checked_sub(1).ok_or_else(|| {
                invalid("the archive's symlinks are chained too deeply to check".to_owned())
            })?;
            match component {
                b"" | b"." => continue,
                b".." => {
                    if stack.pop().is_none() {
                        return Ok(false);
                    }
                    continue;
                }
                _ => {}
            }
            let parent = match stack.last() {
                Some(parent) => *parent,
                None => Some(0),
            };
            let child = parent.and_then(|node| self.nodes[node].children.get(component).copied());
            match child.map(|child| &self.nodes[child].kind) {
                Some(Kind::Symlink(next)) => {
                    hops += 1;
                    if hops > MAX_SYMLINK_HOPS {
                        return Ok(true);
                    }
                    if next.first() == Some(&b'/') {
                        return Ok(false);
                    }
                    pending.extend(next.split(|byte| *byte == b'/').rev());
                }
                _ => stack.push(child),
            }
        }
        Ok(true)
    }
}
