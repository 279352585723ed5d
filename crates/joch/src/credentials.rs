//! `joch credentials list|revoke`: the token vault's upstream tokens, over
//! the REST API (an admin's token). Tokens themselves are never shown.

use clap::{Args, Subcommand};
use reqwest::Method;

use crate::cli::ClientArgs;
use crate::client::Client;

#[derive(Debug, Args)]
pub struct CredentialsArgs {
    #[command(subcommand)]
    pub action: CredentialsAction,
    #[arg(short, long, global = true, default_value = "default")]
    pub namespace: String,
}

#[derive(Debug, Subcommand)]
pub enum CredentialsAction {
    /// List the namespace's credentials: name, upstream, user, expiry, key id.
    List,
    /// Revoke a credential: the next call that needs it obtains a new token.
    Revoke {
        #[arg(value_name = "NAME")]
        name: String,
    },
}

pub async fn run(client_args: &ClientArgs, args: CredentialsArgs) -> anyhow::Result<()> {
    let client = Client::new(client_args)?;
    let base = format!("/v1/namespaces/{}/credentials", args.namespace);
    match args.action {
        CredentialsAction::List => {
            let list = client.expect_ok(Method::GET, &base, None).await?;
            for credential in list["items"].as_array().into_iter().flatten() {
                let spec = &credential["spec"];
                println!(
                    "{}\t{}/{}\t{}\t{}\t{}",
                    credential["metadata"]["name"].as_str().unwrap_or("?"),
                    spec["upstream"]["kind"].as_str().unwrap_or("?"),
                    spec["upstream"]["name"].as_str().unwrap_or("?"),
                    spec["user"].as_str().unwrap_or("(service)"),
                    spec["expiresAt"].as_str().unwrap_or("-"),
                    spec["keyId"].as_str().unwrap_or("?"),
                );
            }
        }
        CredentialsAction::Revoke { name } => {
            client
                .expect_ok(Method::DELETE, &format!("{base}/{name}"), None)
                .await?;
            println!("credential {name} revoked in {}", args.namespace);
        }
    }
    Ok(())
}
