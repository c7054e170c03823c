//! `GET /api/nodes` (issue 36, admin scope): the nodes of the cluster apps run on, read from
//! the engine on every call; no engine configured: none.

use std::sync::Arc;

use super::paging::{self, Order};
use super::reply::Reply;
use super::{types, ApiError, ApiRequest, Context};

pub async fn list(ctx: &Arc<Context>, request: &ApiRequest) -> Result<Reply, ApiError> {
    let page = paging::parse(request.uri().query())?;
    let cluster = &ctx.config.cluster;
    let nodes = match cluster.engine {
        None => Vec::new(),
        Some(engine) => {
            let docker = crate::cluster::docker::Docker::new(&cluster.docker_socket);
            crate::cluster::nodes::list(&docker)
                .await
                .map_err(ApiError::internal)?
                .into_iter()
                .map(|node| types::Node {
                    id: format!("nod_{}", node.engine_id.to_ascii_lowercase()),
                    name: node.name,
                    address: node.address,
                    engine: engine.as_str().to_owned(),
                    state: node.state,
                    tasks: node.tasks,
                    memory_bytes: node.memory_bytes,
                    cpus: node.cpus,
                })
                .collect()
        }
    };
    // The engine's order (by name) is the page order; the index keeps it stable.
    let indexed: Vec<(u64, types::Node)> = nodes
        .into_iter()
        .enumerate()
        .map(|(i, n)| (i as u64, n))
        .collect();
    let (page_items, next_cursor) = paging::paginate(
        indexed,
        |(i, n)| (*i, n.id.clone()),
        Order::OldestFirst,
        &page,
    );
    Ok(Reply::json(&types::NodeList {
        nodes: page_items.into_iter().map(|(_, n)| n).collect(),
        next_cursor,
    }))
}
