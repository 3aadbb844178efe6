// Render the service's own document; no validator badge, so nothing leaves the service.
window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  validatorUrl: null,
  deepLinking: true,
  persistAuthorization: true,
  tryItOutEnabled: true,
  onComplete: offerSandboxToken,
});

// In sandbox mode the document has POST /sandbox/tokens: offer a visitor a token of their own
// in one click, and authorize "Try it out" with it. Without the mode there is no such path,
// and so no button.
function offerSandboxToken() {
  const spec = window.ui.specSelectors.specJson().toJS();
  if (!spec.paths || !spec.paths["/sandbox/tokens"] || document.getElementById("sandbox-token")) {
    return;
  }
  const specUrl = new URL(window.ui.specSelectors.url() || "/openapi.json", window.location.href);
  const server = (spec.servers && spec.servers[0] && spec.servers[0].url) || "/";
  const base = new URL(server, specUrl).href.replace(/\/+$/, "");
  const schemes = (spec.components && spec.components.securitySchemes) || {};
  const scheme = Object.keys(schemes).find((name) => schemes[name].scheme === "bearer");

  // swagger-ui.css styles only what is inside .swagger-ui: so is the bar, to be styled as the
  // page is (the button as its Authorize button, within the page's width).
  const bar = document.createElement("div");
  bar.id = "sandbox-token";
  bar.className = "swagger-ui";
  const wrapper = document.createElement("div");
  wrapper.className = "wrapper";
  wrapper.style.marginTop = "16px";
  const button = document.createElement("button");
  button.type = "button";
  button.className = "btn authorize sandbox-token__get";
  button.textContent = "Get a sandbox token";
  const status = document.createElement("p");
  status.className = "sandbox-token__status";
  status.setAttribute("role", "status");
  status.style.cssText = "margin: 8px 0 0; word-break: break-all; font-family: sans-serif;";
  wrapper.append(button, status);
  bar.append(wrapper);
  const root = document.getElementById("swagger-ui");
  root.parentNode.insertBefore(bar, root);

  button.addEventListener("click", async () => {
    button.disabled = true;
    status.textContent = "Asking for a token…";
    try {
      const response = await fetch(`${base}/sandbox/tokens`, { method: "POST" });
      const body = await response.json();
      if (!response.ok) {
        const wait = response.headers.get("Retry-After");
        status.textContent = `${body.message}${wait ? ` (retry in ${wait} s)` : ""}`;
        return;
      }
      window.ui.preauthorizeApiKey(scheme, body.token);
      const until = new Date(body.expires_at).toLocaleString();
      status.textContent =
        `Authorized until ${until} as a sandbox user of your own: "Try it out" now uses ` +
        `this token, and your plants are deleted when it expires. Token: ${body.token}`;
      status.dataset.token = body.token;
    } catch (error) {
      status.textContent = `No token: ${error}`;
    } finally {
      button.disabled = false;
    }
  });
}
