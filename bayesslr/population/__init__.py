"""The population family: Bayes risk and the best excess risk of each activation
(docs/model.md)."""
