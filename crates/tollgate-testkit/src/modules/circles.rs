//! Loops in a directed graph of names: the groups of nodes that reach one another (Tarjan's
//! strongly connected components), and one shortest loop through each.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Each group of nodes that reach one another (by name), with one loop through it that starts
/// at the group's first node and is as short as the graph allows; `next` gives a node's
/// successors.
pub(super) fn loops(
    nodes: Vec<String>,
    next: impl Fn(&str) -> Vec<String>,
) -> Vec<(BTreeSet<String>, Vec<String>)> {
    let mut tarjan = Tarjan {
        next: &next,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        groups: Vec::new(),
    };
    for node in &nodes {
        if !tarjan.index.contains_key(node) {
            tarjan.visit(node);
        }
    }
    let mut groups = tarjan.groups;
    groups.retain(|group| group.len() > 1);
    groups.sort();
    groups
        .into_iter()
        .map(|group| {
            let path = shortest_loop(&group, &next);
            (group, path)
        })
        .collect()
}

/// The shortest loop from the group's first node back to it, inside the group.
fn shortest_loop(group: &BTreeSet<String>, next: &impl Fn(&str) -> Vec<String>) -> Vec<String> {
    let start = group.first().expect("a group has nodes").clone();
    let mut came_from: BTreeMap<String, String> = BTreeMap::new();
    let mut queue = VecDeque::from([start.clone()]);
    while let Some(node) = queue.pop_front() {
        for to in next(&node) {
            if !group.contains(&to) {
                continue;
            }
            if to == start {
                let mut path = vec![node.clone()];
                while let Some(before) = came_from.get(path.last().expect("not empty")) {
                    path.push(before.clone());
                }
                path.reverse();
                return path;
            }
            if !came_from.contains_key(&to) {
                came_from.insert(to.clone(), node.clone());
                queue.push_back(to);
            }
        }
    }
    unreachable!("every node of a strongly connected group reaches the others")
}

struct Tarjan<'a, F> {
    next: &'a F,
    index: BTreeMap<String, usize>,
    low: BTreeMap<String, usize>,
    stack: Vec<String>,
    on_stack: BTreeSet<String>,
    groups: Vec<BTreeSet<String>>,
}

impl<F: Fn(&str) -> Vec<String>> Tarjan<'_, F> {
    fn visit(&mut self, node: &str) {
        let index = self.index.len();
        self.index.insert(node.to_owned(), index);
        self.low.insert(node.to_owned(), index);
        self.stack.push(node.to_owned());
        self.on_stack.insert(node.to_owned());
        for to in (self.next)(node) {
            if !self.index.contains_key(&to) {
                self.visit(&to);
                let low = self.low[node].min(self.low[&to]);
                self.low.insert(node.to_owned(), low);
            } else if self.on_stack.contains(&to) {
                let low = self.low[node].min(self.index[&to]);
                self.low.insert(node.to_owned(), low);
            }
        }
        if self.low[node] == self.index[node] {
            let mut group = BTreeSet::new();
            while let Some(member) = self.stack.pop() {
                self.on_stack.remove(&member);
                let last = member == node;
                group.insert(member);
                if last {
                    break;
                }
            }
            self.groups.push(group);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(edges: &[(&str, &str)]) -> (Vec<String>, impl Fn(&str) -> Vec<String>) {
        let edges: Vec<(String, String)> = edges
            .iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect();
        let nodes: BTreeSet<String> = edges.iter().map(|(a, _)| a.clone()).collect();
        let next = move |from: &str| {
            edges
                .iter()
                .filter(|(a, _)| a == from)
                .map(|(_, b)| b.clone())
                .collect()
        };
        (nodes.into_iter().collect(), next)
    }

    #[test]
    fn a_line_has_no_loop() {
        let (nodes, next) = graph(&[("a", "b"), ("b", "c"), ("a", "c")]);
        assert!(loops(nodes, next).is_empty());
    }

    #[test]
    fn each_group_gives_its_shortest_loop() {
        let (nodes, next) = graph(&[
            ("a", "b"),
            ("b", "c"),
            ("c", "d"),
            ("d", "a"),
            ("c", "a"),
            ("x", "y"),
            ("y", "x"),
            ("d", "x"),
        ]);
        let found = loops(nodes, next);
        let paths: Vec<&Vec<String>> = found.iter().map(|(_, path)| path).collect();
        assert_eq!(paths, [&vec!["a", "b", "c"], &vec!["x", "y"]]);
        assert_eq!(
            found[0].0,
            BTreeSet::from(["a", "b", "c", "d"].map(String::from))
        );
    }
}
