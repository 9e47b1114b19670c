// Seller configuration of the registration page. Edit this file (only this one) when
// you deploy: it is served next to index.html from S3 + CloudFront.
//
// - registerEndpoint: the register API's URL. The page's CloudFront distribution serves
//   it on the page's own origin, so the relative "register" is right; deploy.sh also
//   writes the main stack's RegisterUrl output into config.json, which wins.
// - fields: what the buyer fills in. Every `name` must also be listed in the register
//   function's ALLOWED_REGISTRATION_FIELDS, or the register function drops it.
//   type: "text" | "email" | "tel" | "url" | "textarea" | "select" (with `options`).
//   required: true makes the page insist on a value before posting.
//   maxLength: at most 1000 (the register function refuses longer values).
//   autocomplete: an HTML autocomplete token, so browsers can fill the field in.
// - brandColor: any CSS colour with enough contrast against white text.
window.AWSMP_REGISTRATION_CONFIG = {
  productName: "Example Analytics",
  sellerName: "Example Software, Inc.",
  logoUrl: "",
  brandColor: "#1b4f8a",
  supportUrl: "mailto:support@example.com",
  registerEndpoint: "register",
  fields: [
    { name: "companyName", label: "Company name", type: "text", required: true, autocomplete: "organization", maxLength: 200 },
    { name: "contactName", label: "Your name", type: "text", required: true, autocomplete: "name", maxLength: 200 },
    { name: "contactEmail", label: "Work email", type: "email", required: true, autocomplete: "email", maxLength: 254 },
    { name: "contactPhone", label: "Phone (optional)", type: "tel", required: false, autocomplete: "tel", maxLength: 50 },
  ],
};
