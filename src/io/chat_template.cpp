// placeholder: implemented by the owning work item
