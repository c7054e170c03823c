//! `slipway nodes [--json]`: the cluster's nodes from `GET /api/nodes` (admin scope), one
//! line each: name, id, address, engine, state, tasks, memory and CPUs.

use std::process::ExitCode;

use crate::api::types::NodeList;

use super::display::table;
use super::http::ApiClient;
use super::ClientError;

pub async fn nodes(api: &ApiClient, json: bool) -> Result<ExitCode, ClientError> {
    if json {
        return api.print_json("/api/nodes").await;
    }
    let list: NodeList = api.get("/api/nodes").await?;
    print!("{}", nodes_table(&list));
    Ok(ExitCode::SUCCESS)
}

pub fn nodes_table(list: &NodeList) -> String {
    if list.nodes.is_empty() {
        return "no cluster nodes: apps run on this machine (set [cluster] engine to use one)\n"
            .to_owned();
    }
    let mut rows = vec![[
        "NAME", "ID", "ADDRESS", "ENGINE", "STATE", "TASKS", "MEMORY", "CPUS",
    ]
    .map(str::to_owned)
    .to_vec()];
    for node in &list.nodes {
        rows.push(vec![
            node.name.clone(),
            node.id.clone(),
            node.address.clone(),
            node.engine.clone(),
            node.state.clone(),
            node.tasks.to_string(),
            format!("{} MiB", node.memory_bytes >> 20),
            format!("{}", node.cpus),
        ]);
    }
    table(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::types::Node;

    #[test]
    fn a_node_per_line_and_a_word_when_there_is_no_cluster() {
        let empty = NodeList {
            nodes: Vec::new(),
            next_cursor: None,
        };
        assert!(nodes_table(&empty).contains("no cluster nodes"));
        let one = NodeList {
            nodes: vec![Node {
                id: "nod_abc".into(),
                name: "worker-1".into(),
                address: "10.0.0.2".into(),
                engine: "swarm".into(),
                state: "down".into(),
                tasks: 3,
                memory_bytes: 2 << 30,
                cpus: 2.0,
            }],
            next_cursor: None,
        };
        let text = nodes_table(&one);
        assert!(text.starts_with("NAME"), "{text}");
        let line = text.lines().nth(1).unwrap();
        for word in [
            "worker-1", "nod_abc", "10.0.0.2", "swarm", "down", "3", "2048 MiB", "2",
        ] {
            assert!(line.contains(word), "{word} in {line}");
        }
    }
}
