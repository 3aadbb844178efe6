// Render the service's own document; no validator badge, so nothing leaves the service.
window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  validatorUrl: null,
  deepLinking: true,
  persistAuthorization: true,
  tryItOutEnabled: true,
});
